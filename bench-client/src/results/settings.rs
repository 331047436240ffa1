//! A load run's arrivals, stop and workload as its manifest records them (`schedule`, `stop`,
//! `workload`): typed JSON objects, read back by the same types. Manifests of earlier versions hold Rust's
//! debug text of the settings instead; they read as [`Recorded::Text`], which
//! `report::compare` reads with its debug-text fallback.

use serde::{Deserialize, Serialize};

use crate::plan::schedule::{ArrivalKind, Arrivals, Stop};
use crate::plan::trace::TraceSettings;
use crate::plan::workload::{LenDist, Workload};

/// A setting as a manifest holds it: typed, or the debug text of an earlier version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Recorded<T> {
    /// As this version writes it.
    Typed(T),
    /// Rust's debug text of the setting (`Closed { concurrency: 64 }`), cut at 400 characters,
    /// as earlier versions wrote it.
    Text(String),
}

/// How many characters of debug text earlier versions kept.
const TEXT_CHARS: usize = 400;

/// A load run's arrivals (the manifest's `schedule`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ScheduleRecord {
    /// This many requests (or sessions) in flight, over all shards together.
    Closed {
        /// Requests in flight.
        concurrency: u32,
    },
    /// Requests arrive at `rate` per second, over all shards together.
    Open {
        /// Requests per second.
        rate: f64,
        /// How gaps are drawn.
        arrival: ArrivalKind,
        /// Gamma shape of the gaps.
        burstiness: f64,
    },
    /// At a trace's offsets (the workload names the trace).
    Trace {
        /// Arrivals, one per request of the trace.
        requests: u64,
    },
    /// A closed loop of multi-turn sessions (the manifest's `sessions` says what they send).
    Sessions {
        /// Sessions in flight in this shard.
        shard_in_flight: u32,
    },
}

impl ScheduleRecord {
    /// The record of `arrivals`.
    pub fn of(arrivals: &Arrivals) -> Self {
        match arrivals {
            Arrivals::Closed { concurrency } => Self::Closed {
                concurrency: *concurrency,
            },
            Arrivals::Open {
                rate,
                kind,
                burstiness,
            } => Self::Open {
                rate: *rate,
                arrival: *kind,
                burstiness: *burstiness,
            },
            Arrivals::Trace { offsets_ns } => Self::Trace {
                requests: offsets_ns.len() as u64,
            },
        }
    }

    /// Whether `self` records the same arrivals as `other`: rates within a relative 1e-9, since
    /// JSON numbers read back may differ from those written in the last bit.
    fn same(&self, other: &Self) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
        match (self, other) {
            (
                Self::Open {
                    rate: r1,
                    arrival: a1,
                    burstiness: b1,
                },
                Self::Open {
                    rate: r2,
                    arrival: a2,
                    burstiness: b2,
                },
            ) => a1 == a2 && close(*r1, *r2) && close(*b1, *b2),
            _ => self == other,
        }
    }
}

impl Recorded<ScheduleRecord> {
    /// The manifest's `schedule` of a run with `arrivals`.
    pub fn of(arrivals: &Arrivals) -> Self {
        Self::Typed(ScheduleRecord::of(arrivals))
    }

    /// Whether this records `arrivals` (either form).
    pub fn records(&self, arrivals: &Arrivals) -> bool {
        match self {
            Self::Typed(r) => r.same(&ScheduleRecord::of(arrivals)),
            Self::Text(t) => *t == debug_text(arrivals),
        }
    }

    /// The arrivals in words, for messages.
    pub fn describe(&self) -> String {
        match self {
            Self::Typed(ScheduleRecord::Closed { concurrency }) => {
                format!("a closed loop at {concurrency} in flight")
            }
            Self::Typed(ScheduleRecord::Open {
                rate,
                arrival,
                burstiness,
            }) => format!("an open loop at {rate} req/s ({arrival:?}, burstiness {burstiness})"),
            Self::Typed(ScheduleRecord::Trace { requests }) => {
                format!("a trace's arrivals ({requests} requests)")
            }
            Self::Typed(ScheduleRecord::Sessions { shard_in_flight }) => {
                format!("closed loop of sessions, {shard_in_flight} in flight in this shard")
            }
            Self::Text(t) => t.clone(),
        }
    }
}

/// When a load run ends (the manifest's `stop`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopRecord {
    /// After this many measured requests, over all shards together.
    Requests(u64),
    /// No request is scheduled or started after this many seconds.
    DurationS(f64),
}

impl Recorded<StopRecord> {
    /// The manifest's `stop` of a run that ends at `stop`.
    pub fn of(stop: Stop) -> Self {
        Self::Typed(match stop {
            Stop::Requests(n) => StopRecord::Requests(n),
            Stop::Duration(d) => StopRecord::DurationS(d.as_secs_f64()),
        })
    }
}

/// What a load run sends (the manifest's `workload`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum WorkloadRecord {
    /// Unique random prompts.
    Random {
        /// Prompt lengths.
        input: LenDist,
        /// Output lengths.
        output: LenDist,
    },
    /// Groups of prompts that share a prefix.
    SharedPrefix {
        /// Groups.
        groups: u32,
        /// Tokens of each group's prefix.
        prefix_len: u32,
        /// Lengths of the unique suffixes.
        input: LenDist,
        /// Output lengths.
        output: LenDist,
    },
    /// A trace's requests.
    Trace {
        /// The trace's settings and size.
        trace: TraceSettings,
    },
    /// Multi-turn sessions (the manifest's `sessions` says what they send).
    Sessions,
}

impl WorkloadRecord {
    /// The record of `workload`.
    pub fn of(workload: &Workload) -> Self {
        match workload {
            Workload::Random { input, output } => Self::Random {
                input: input.clone(),
                output: output.clone(),
            },
            Workload::SharedPrefix {
                groups,
                prefix_len,
                input,
                output,
            } => Self::SharedPrefix {
                groups: *groups,
                prefix_len: *prefix_len,
                input: input.clone(),
                output: output.clone(),
            },
            Workload::Trace(t) => Self::Trace {
                trace: t.settings(),
            },
        }
    }
}

impl Recorded<WorkloadRecord> {
    /// The manifest's `workload` of a run sending `workload`.
    pub fn of(workload: &Workload) -> Self {
        Self::Typed(WorkloadRecord::of(workload))
    }
}

/// The debug text of `v` as earlier versions recorded it: cut at 400 characters.
pub fn debug_text(v: &impl std::fmt::Debug) -> String {
    format!("{v:?}").chars().take(TEXT_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_settings_read_back_by_the_same_types() {
        let s = Recorded::<ScheduleRecord>::of(&Arrivals::Open {
            rate: 0.1 + 0.2,
            kind: ArrivalKind::Gamma,
            burstiness: 0.5,
        });
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"open","rate":0.30000000000000004,"arrival":"gamma","burstiness":0.5}"#
        );
        assert_eq!(
            serde_json::from_str::<Recorded<ScheduleRecord>>(&text).unwrap(),
            s
        );
        let w = Recorded::<WorkloadRecord>::of(&Workload::SharedPrefix {
            groups: 4,
            prefix_len: 512,
            input: LenDist::Fixed { n: 256 },
            output: LenDist::Uniform { lo: 1, hi: 9 },
        });
        let text = serde_json::to_string(&w).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"shared-prefix","groups":4,"prefix_len":512,"input":{"kind":"fixed","n":256},"output":{"kind":"uniform","lo":1,"hi":9}}"#
        );
        assert_eq!(
            serde_json::from_str::<Recorded<WorkloadRecord>>(&text).unwrap(),
            w
        );
    }

    #[test]
    fn a_manifest_line_holds_them_with_sorted_keys_and_reads_them_back() {
        let m = crate::results::Manifest {
            schedule: Some(Recorded::<ScheduleRecord>::of(&Arrivals::Closed {
                concurrency: 64,
            })),
            workload: Some(Recorded::<WorkloadRecord>::of(&Workload::Random {
                input: LenDist::Fixed { n: 8 },
                output: LenDist::Fixed { n: 4 },
            })),
            ..Default::default()
        };
        let line = serde_json::to_string(&m).unwrap();
        assert!(
            line.contains(r#""schedule":{"concurrency":64,"kind":"closed"}"#)
                && line.contains(r#""workload":{"input":{"kind":"fixed","n":8},"kind":"random","output":{"kind":"fixed","n":4}}"#),
            "{line}"
        );
        let back: crate::results::Manifest = serde_json::from_str(&line).unwrap();
        assert_eq!((back.schedule, back.workload), (m.schedule, m.workload));
    }

    #[test]
    fn debug_text_of_earlier_versions_reads_as_text_and_matches_its_arrivals() {
        let closed = Arrivals::Closed { concurrency: 4 };
        let old: Recorded<ScheduleRecord> =
            serde_json::from_str(r#""Closed { concurrency: 4 }""#).unwrap();
        assert_eq!(old, Recorded::Text("Closed { concurrency: 4 }".into()));
        assert!(old.records(&closed));
        assert!(!old.records(&Arrivals::Closed { concurrency: 5 }));
        assert!(Recorded::<ScheduleRecord>::of(&closed).records(&closed));
        assert!(
            !Recorded::<ScheduleRecord>::of(&closed).records(&Arrivals::Closed { concurrency: 8 })
        );
    }

    #[test]
    fn the_stop_is_typed_and_the_text_of_earlier_versions_still_reads() {
        let by_count = Recorded::<StopRecord>::of(Stop::Requests(4));
        let by_time =
            Recorded::<StopRecord>::of(Stop::Duration(std::time::Duration::from_millis(2500)));
        assert_eq!(
            serde_json::to_string(&by_count).unwrap(),
            r#"{"requests":4}"#
        );
        assert_eq!(
            serde_json::to_string(&by_time).unwrap(),
            r#"{"duration_s":2.5}"#
        );
        for r in [&by_count, &by_time] {
            let back: Recorded<StopRecord> =
                serde_json::from_str(&serde_json::to_string(r).unwrap()).unwrap();
            assert_eq!(&back, r);
        }
        let old: Recorded<StopRecord> = serde_json::from_str(r#""Requests(4)""#).unwrap();
        assert_eq!(old, Recorded::Text("Requests(4)".into()));
    }
}
