//! What a run sent, in words: the dialect, how requests arrived (closed loop at a concurrency, open
//! loop at a rate, a trace's arrivals, sessions), the prompt and output lengths, shared prefixes,
//! the trace's settings and the sessions'. Two runs of different workloads are different
//! experiments: a verdict between them says nothing about the server, so `compare` refuses them
//! unless told otherwise. The descriptions are built from the manifests in `super::manifest`.

use std::fmt;

/// How requests arrived.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrivals {
    /// A closed loop: this many requests in flight (over all shards).
    Closed(u64),
    /// An open loop at `rate` requests per second.
    Open {
        rate: f64,
        process: String,
        burstiness: f64,
    },
    /// A trace's own arrival times.
    Trace,
    /// Multi-turn sessions in a closed loop (`schedule` as the run wrote it).
    Sessions(String),
    /// A sweep: one request at a time, per context length.
    Sweep,
}

impl fmt::Display for Arrivals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arrivals::Closed(c) => write!(f, "a closed loop at {c} in flight"),
            Arrivals::Open {
                rate,
                process,
                burstiness,
            } => {
                write!(f, "an open loop at {} req/s ({process}", num(*rate))?;
                if process != "Poisson" {
                    write!(f, ", burstiness {}", num(*burstiness))?;
                }
                write!(f, ")")
            }
            Arrivals::Trace => write!(f, "a trace replayed at its own arrival times"),
            Arrivals::Sessions(s) => write!(f, "multi-turn sessions ({s})"),
            Arrivals::Sweep => write!(f, "a sweep (one request at a time)"),
        }
    }
}

/// A trace's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSettings {
    pub source: String,
    pub format: String,
    pub requests: Option<u64>,
    pub speedup: f64,
    pub limit: Option<u64>,
    pub scale: f64,
    pub block_size: u64,
    pub prefix_len: u64,
}

/// What the prompts were.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompts {
    /// Unique random prompts of these input and output lengths (in words).
    Random { input: String, output: String },
    /// `groups` groups sharing a `prefix_len`-token prefix, then unique inputs.
    SharedPrefix {
        groups: u64,
        prefix_len: u64,
        input: String,
        output: String,
    },
    /// A trace's requests.
    Trace(TraceSettings),
    /// Multi-turn sessions, described.
    Sessions(String),
    /// A sweep's output tokens per request (the contexts are compared row by row).
    Sweep { output_tokens: Option<u64> },
    /// Not understood: the manifest's text, shown as it is.
    Other(String),
}

/// One run's workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub dialect: Option<String>,
    pub arrivals: Option<Arrivals>,
    /// Open loop: at most this many in flight.
    pub max_concurrency: Option<u64>,
    pub prompts: Prompts,
}

impl Workload {
    /// What its manifest does not say, in words (none: everything is known).
    pub fn unknown(&self) -> Option<&'static str> {
        match (&self.arrivals, &self.prompts) {
            (None, Prompts::Other(_)) => Some("its arrivals and prompts"),
            (None, _) => Some("its arrivals"),
            (_, Prompts::Other(_)) => Some("its prompts"),
            _ => None,
        }
    }
}

/// A number without a trailing `.0`.
pub(super) fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn or_none<T: fmt::Display>(v: &Option<T>, none: &str) -> String {
    v.as_ref().map_or_else(|| none.to_string(), T::to_string)
}

/// Sentences saying how `b` (BASE) and `n` (NEW) differ; none when they are the same workload.
/// Arrivals or prompts unknown on either side are not compared ([`Workload::unknown`]).
pub fn differences(b: &Workload, n: &Workload) -> Vec<String> {
    let mut out = Vec::new();
    let mut say = |what: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{what}: BASE {x}, NEW {y}"));
        }
    };
    // What a side's manifest does not say (an imported run's) cannot be held against the other.
    if b.arrivals.is_some() && n.arrivals.is_some() && b.arrivals != n.arrivals {
        say(
            "workload differs",
            format!("is {}", or_none(&b.arrivals, "of unknown arrivals")),
            or_none(&n.arrivals, "of unknown arrivals"),
        );
    }
    if b.dialect != n.dialect {
        say(
            "dialect differs",
            or_none(&b.dialect, "unknown"),
            or_none(&n.dialect, "unknown"),
        );
    }
    let cap = |w: &Workload| {
        w.max_concurrency
            .map_or("no cap".to_string(), |c| format!("at most {c} in flight"))
    };
    say("in-flight cap differs", cap(b), cap(n));
    match (&b.prompts, &n.prompts) {
        (
            Prompts::Random {
                input: i1,
                output: o1,
            },
            Prompts::Random {
                input: i2,
                output: o2,
            },
        ) => {
            say("input lengths differ", i1.clone(), i2.clone());
            say("output lengths differ", o1.clone(), o2.clone());
        }
        (
            Prompts::SharedPrefix {
                groups: g1,
                prefix_len: p1,
                input: i1,
                output: o1,
            },
            Prompts::SharedPrefix {
                groups: g2,
                prefix_len: p2,
                input: i2,
                output: o2,
            },
        ) => {
            say("prefix settings differ", prefix(*g1, *p1), prefix(*g2, *p2));
            say("input lengths differ", i1.clone(), i2.clone());
            say("output lengths differ", o1.clone(), o2.clone());
        }
        (Prompts::Trace(t1), Prompts::Trace(t2)) => {
            say("trace file differs", t1.source.clone(), t2.source.clone());
            say("trace format differs", t1.format.clone(), t2.format.clone());
            say(
                "trace speedup differs",
                format!("{}x", num(t1.speedup)),
                format!("{}x", num(t2.speedup)),
            );
            let limit = |t: &TraceSettings| {
                t.limit
                    .map_or("no limit".into(), |l| format!("the first {l} requests"))
            };
            say("trace limit differs", limit(t1), limit(t2));
            say(
                "trace scale differs",
                format!("{}x", num(t1.scale)),
                format!("{}x", num(t2.scale)),
            );
            say(
                "trace block size differs",
                format!("{} tokens", t1.block_size),
                format!("{} tokens", t2.block_size),
            );
            say(
                "trace prefix length differs",
                format!("{} tokens", t1.prefix_len),
                format!("{} tokens", t2.prefix_len),
            );
        }
        (Prompts::Sessions(s1), Prompts::Sessions(s2)) => {
            say("sessions differ", s1.clone(), s2.clone())
        }
        (Prompts::Sweep { output_tokens: a }, Prompts::Sweep { output_tokens: b }) => say(
            "output tokens per request differ",
            or_none(a, "unknown"),
            or_none(b, "unknown"),
        ),
        (Prompts::Other(_), _) | (_, Prompts::Other(_)) => {}
        (x, y) => say("prompts differ", prompts(x), prompts(y)),
    }
    out
}

fn prefix(groups: u64, len: u64) -> String {
    format!("{groups} groups sharing a {len}-token prefix")
}

/// The prompts in words.
pub fn prompts(p: &Prompts) -> String {
    match p {
        Prompts::Random { input, output } => {
            format!("random prompts of {input} in, {output} out")
        }
        Prompts::SharedPrefix {
            groups,
            prefix_len,
            input,
            output,
        } => format!(
            "{}, then {input} in, {output} out",
            prefix(*groups, *prefix_len)
        ),
        Prompts::Trace(t) => format!(
            "the {} trace {}{}",
            t.format,
            t.source,
            t.requests
                .map_or(String::new(), |r| format!(" ({r} requests)"))
        ),
        Prompts::Sessions(s) => s.clone(),
        Prompts::Sweep { output_tokens } => {
            format!("{} output tokens a request", or_none(output_tokens, "?"))
        }
        Prompts::Other(s) => format!("\"{s}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(arrivals: Arrivals, input: &str) -> Workload {
        Workload {
            dialect: Some("sglang".into()),
            arrivals: Some(arrivals),
            max_concurrency: None,
            prompts: Prompts::Random {
                input: input.into(),
                output: "64 tokens".into(),
            },
        }
    }

    #[test]
    fn differences_are_sentences() {
        let open = Arrivals::Open {
            rate: 20.0,
            process: "Poisson".into(),
            burstiness: 1.0,
        };
        let a = random(Arrivals::Closed(64), "256 tokens");
        let b = random(open, "uniform 256-1024 tokens");
        assert_eq!(
            differences(&a, &b),
            vec![
                "workload differs: BASE is a closed loop at 64 in flight, NEW an open loop at 20 req/s (Poisson)",
                "input lengths differ: BASE 256 tokens, NEW uniform 256-1024 tokens",
            ]
        );
        assert!(differences(&a, &a).is_empty());
        // An imported run's manifest says neither: nothing to hold against the other side.
        let imported = Workload {
            dialect: Some("sglang".into()),
            arrivals: None,
            max_concurrency: None,
            prompts: Prompts::Other(String::new()),
        };
        assert!(differences(&imported, &a).is_empty());
        assert_eq!(imported.unknown(), Some("its arrivals and prompts"));
    }
}
