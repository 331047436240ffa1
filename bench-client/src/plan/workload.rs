//! Load-run workloads: random token-id prompts with input/output length distributions, shared-prefix
//! groups that exercise the prefix cache on purpose, and replay of a trace (`plan::trace`). Every
//! request is a pure function of (seed, request index), so shards and resumed runs draw the same requests.

use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};
use serde::{Deserialize, Serialize};

use crate::plan::prompt::PromptGen;
use crate::plan::trace::Trace;

/// A length distribution in tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum LenDist {
    /// Always `n`.
    Fixed { n: u32 },
    /// Uniform on `[lo, hi]`.
    Uniform { lo: u32, hi: u32 },
    /// Normal with `mean` and `std`, rounded and clamped to `[1, 2 * mean]`.
    Normal { mean: f64, std: f64 },
}

impl LenDist {
    /// Parse `512`, `uniform:256:1024` or `normal:1000:200`; `k` = 1,000 tokens (`2k`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let num = |p: &str| -> Result<f64, String> {
            let p = p.trim();
            let (n, mult) = match p.strip_suffix(['k', 'K']) {
                Some(n) => (n, 1000.0),
                None => (p, 1.0),
            };
            let v: f64 = n
                .parse()
                .map_err(|_| format!("{p:?} is not a number in length distribution {s:?}"))?;
            let v = v * mult;
            if !v.is_finite() || v < 0.0 || v > f64::from(crate::plan::MAX_TOKENS) {
                return Err(format!(
                    "{p:?} is out of range in length distribution {s:?} (at most {} tokens)",
                    crate::plan::MAX_TOKENS
                ));
            }
            Ok(v)
        };
        // A length is a whole number of tokens (a normal's mean and spread need not be).
        let whole = |p: &str| -> Result<u32, String> {
            let v = num(p)?;
            if v.fract() != 0.0 {
                return Err(format!(
                    "{:?} is no whole number of tokens in length distribution {s:?}",
                    p.trim()
                ));
            }
            Ok(v as u32)
        };
        let parts: Vec<&str> = s.split(':').collect();
        let d = match parts.as_slice() {
            [n] | ["fixed", n] => Self::Fixed { n: whole(n)? },
            ["uniform", lo, hi] => Self::Uniform {
                lo: whole(lo)?,
                hi: whole(hi)?,
            },
            ["normal", mean, std] => Self::Normal {
                mean: num(mean)?,
                std: num(std)?,
            },
            _ => {
                return Err(format!(
                "length distribution {s:?} not understood (examples: 512, uniform:256:1024, normal:1000:200)"
            ))
            }
        };
        d.validate()?;
        Ok(d)
    }

    fn validate(&self) -> Result<(), String> {
        match *self {
            Self::Fixed { n: 0 } => Err("a fixed length must be at least 1".into()),
            Self::Uniform { lo, hi } if lo == 0 || hi < lo => {
                Err(format!("uniform:{lo}:{hi} needs 1 <= lo <= hi"))
            }
            Self::Normal { mean, std } if mean < 1.0 || std < 0.0 => {
                Err(format!("normal:{mean}:{std} needs mean >= 1 and std >= 0"))
            }
            _ => Ok(()),
        }
    }

    /// The mean length a draw has (the normal's before its clamp).
    pub fn mean(&self) -> f64 {
        match *self {
            Self::Fixed { n } => f64::from(n),
            Self::Uniform { lo, hi } => (f64::from(lo) + f64::from(hi)) / 2.0,
            Self::Normal { mean, .. } => mean,
        }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        match *self {
            Self::Fixed { n } => n,
            Self::Uniform { lo, hi } => match Uniform::new_inclusive(lo, hi) {
                Ok(u) => u.sample(rng),
                Err(_) => lo,
            },
            Self::Normal { mean, std } => {
                let x = match Normal::new(mean, std) {
                    Ok(n) => n.sample(rng),
                    Err(_) => mean,
                };
                let hi = (2.0 * mean).clamp(1.0, f64::from(crate::plan::MAX_TOKENS));
                if x.is_finite() {
                    x.round().clamp(1.0, hi) as u32
                } else {
                    mean.round().max(1.0) as u32
                }
            }
        }
    }
}

/// What prompts and output lengths a load run sends.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Unique random prompts.
    Random { input: LenDist, output: LenDist },
    /// `groups` groups; request `i` belongs to group `i % groups` and starts with its group's
    /// `prefix_len`-token prefix, followed by a unique suffix of `input` tokens.
    SharedPrefix {
        groups: u32,
        prefix_len: u32,
        input: LenDist,
        output: LenDist,
    },
    /// A trace (Mooncake, Azure or native), read and checked: its arrivals are the schedule's.
    Trace(Arc<Trace>),
}

impl Workload {
    /// The mean tokens a request holds in the KV cache at its end: its prompt and its output.
    pub fn mean_tokens(&self) -> f64 {
        match self {
            Self::Random { input, output } => input.mean() + output.mean(),
            Self::SharedPrefix {
                prefix_len,
                input,
                output,
                ..
            } => f64::from(*prefix_len) + input.mean() + output.mean(),
            Self::Trace(t) => {
                let lengths = t.lengths();
                let sum: f64 = lengths
                    .iter()
                    .map(|&(i, o)| f64::from(i) + f64::from(o))
                    .sum();
                sum / lengths.len().max(1) as f64
            }
        }
    }
}

/// One request of a load run.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedRequest {
    /// Index in the run's schedule.
    pub index: u64,
    /// Prompt token ids (exact length).
    pub prompt: Vec<u32>,
    /// Output tokens asked.
    pub output_len: u32,
    /// Prefix group, for shared-prefix and replay workloads.
    pub prefix_group: Option<u32>,
}

/// Draws a run's requests.
#[derive(Clone, Debug)]
pub struct Planner {
    workload: Workload,
    seed: u64,
    prompts: PromptGen,
    prefixes: PromptGen,
}

/// Index space of warm-up requests, apart from measured ones.
pub const WARMUP_INDEX_BASE: u64 = 1 << 62;

impl Planner {
    /// A planner for `workload`; token ids in `[id_min, id_max)`.
    pub fn new(workload: Workload, seed: u64, id_range: (u32, u32)) -> Result<Self, String> {
        match &workload {
            Workload::SharedPrefix { groups, .. } if *groups == 0 => {
                return Err("--prefix-groups must be at least 1".into())
            }
            Workload::SharedPrefix { prefix_len, .. } if *prefix_len > crate::plan::MAX_TOKENS => {
                return Err(format!(
                    "--prefix-len {prefix_len}: at most {} tokens",
                    crate::plan::MAX_TOKENS
                ))
            }
            _ => {}
        }
        Ok(Self {
            workload,
            seed,
            prompts: PromptGen::with_range(seed, id_range.0, id_range.1)?,
            prefixes: PromptGen::with_range(seed ^ 0x5a5a_9e37_79b9_7f4a, id_range.0, id_range.1)?,
        })
    }

    /// Salt the prompt contents (not the lengths, groups or schedule): a run against a server whose
    /// prefix cache is still warm from an earlier run with the same seed must not be served from it.
    /// `run_load` salts with `--start-at`, which all shards of one run share (so they share their group
    /// prefixes), or with a random number when a run has no shared start.
    pub fn salted(mut self, salt: u64) -> Self {
        let mix = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.prompts = self.prompts.reseeded(self.seed ^ mix);
        self.prefixes = self
            .prefixes
            .reseeded(self.seed ^ mix ^ 0x5a5a_9e37_79b9_7f4a);
        self
    }

    /// The workload.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    fn rng(&self, index: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x10ad_0000_0000_0001);
        rng.set_stream(index);
        rng
    }

    /// Request `index`; `None` past the end of a replay trace.
    pub fn request(&self, index: u64) -> Option<PlannedRequest> {
        let mut rng = self.rng(index);
        let (prefix, suffix_len, output_len, group) = match &self.workload {
            Workload::Random { input, output } => {
                let i = input.sample(&mut rng);
                (Vec::new(), i, output.sample(&mut rng), None)
            }
            Workload::SharedPrefix {
                groups,
                prefix_len,
                input,
                output,
            } => {
                let g = (index % u64::from(*groups)) as u32;
                let i = input.sample(&mut rng);
                (
                    self.prefixes.token_ids(*prefix_len, u64::from(g)),
                    i,
                    output.sample(&mut rng),
                    Some(g),
                )
            }
            // Shared blocks and group prefixes come from `prefixes`, so the prompt salt applies and
            // every shard builds the same ones.
            Workload::Trace(t) => return t.request(index, &self.prompts, &self.prefixes),
        };
        let mut prompt = prefix;
        prompt.extend(self.prompts.token_ids(suffix_len, index));
        Some(PlannedRequest {
            index,
            prompt,
            output_len,
            prefix_group: group,
        })
    }

    /// The prompt length of request `index`, drawn as [`Planner::request`] draws it, without
    /// building the prompt; `None` past the end of a replay trace.
    pub fn prompt_len(&self, index: u64) -> Option<u32> {
        let mut rng = self.rng(index);
        match &self.workload {
            Workload::Random { input, .. } => Some(input.sample(&mut rng)),
            Workload::SharedPrefix {
                prefix_len, input, ..
            } => Some(prefix_len.saturating_add(input.sample(&mut rng))),
            Workload::Trace(_) => self
                .request(index)
                .map(|p| u32::try_from(p.prompt.len()).unwrap_or(u32::MAX)),
        }
    }

    /// Warm-up request `k`: the lengths of measured request `k` (of the trace's `k`-th entry, cycling),
    /// but a unique prompt with no group prefix, so warm-up never primes a measured request's cache.
    pub fn warmup(&self, k: u64) -> Option<PlannedRequest> {
        let k_eff = match &self.workload {
            Workload::Trace(t) if !t.is_empty() => k % t.len() as u64,
            _ => k,
        };
        let planned = self.request(k_eff)?;
        let index = WARMUP_INDEX_BASE + k;
        Some(PlannedRequest {
            index,
            prompt: self.prompts.token_ids(planned.prompt.len() as u32, index),
            output_len: planned.output_len,
            prefix_group: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_distributions() {
        assert_eq!(LenDist::parse("512").unwrap(), LenDist::Fixed { n: 512 });
        assert_eq!(LenDist::parse("2k").unwrap(), LenDist::Fixed { n: 2000 });
        assert_eq!(
            LenDist::parse("uniform:1:8").unwrap(),
            LenDist::Uniform { lo: 1, hi: 8 }
        );
        assert!(LenDist::parse("normal:100:10").is_ok());
        // A prompt is built whole: at most 2^24 tokens.
        assert!(LenDist::parse("16777216").is_ok());
        for bad in [
            "4000000k",
            "uniform:1:16777217",
            "normal:20000000:1",
            "0",
            "uniform:9:8",
            "normal:0:1",
            "zipf:1:2",
            "abc",
            "-3",
            "nan",
            "1.5",
            "uniform:8:12.5",
        ] {
            assert!(LenDist::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn samples_stay_in_range() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let u = LenDist::parse("uniform:3:9").unwrap();
        let n = LenDist::parse("normal:10:50").unwrap();
        for _ in 0..1000 {
            assert!((3..=9).contains(&u.sample(&mut rng)));
            assert!((1..=20).contains(&n.sample(&mut rng)));
        }
    }

    #[test]
    fn shared_prefix_groups_share_exactly_the_prefix() {
        let w = Workload::SharedPrefix {
            groups: 2,
            prefix_len: 16,
            input: LenDist::Fixed { n: 8 },
            output: LenDist::Fixed { n: 4 },
        };
        let p = Planner::new(w, 3, (100, 4000)).unwrap();
        let (a, b, c) = (
            p.request(0).unwrap(),
            p.request(2).unwrap(),
            p.request(1).unwrap(),
        );
        assert_eq!(a.prompt.len(), 24);
        assert_eq!(a.prompt[..16], b.prompt[..16]);
        assert_ne!(a.prompt[16..], b.prompt[16..]);
        assert_ne!(a.prompt[..16], c.prompt[..16]);
        assert_eq!(p.request(5), p.request(5));
    }
}
