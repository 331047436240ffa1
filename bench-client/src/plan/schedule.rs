//! Seeded arrival schedules: closed loop (a fixed number of requests in flight) or open loop (Poisson
//! or gamma arrivals at a target rate, or a trace's offsets), bounded by a request count or a duration.
//! `--shard I/N` takes every request whose index is I modulo N from the SAME schedule, so the union
//! of the N shards is the unsharded schedule, request for request and instant for instant.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

/// How inter-arrival gaps are drawn in an open loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ArrivalKind {
    /// Exponential gaps (burstiness 1).
    Poisson,
    /// Gamma gaps with shape = burstiness, mean = 1 / rate.
    Gamma,
}

/// When requests start.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrivals {
    /// `concurrency` requests in flight at all times (over all shards together).
    Closed { concurrency: u32 },
    /// Requests arrive at `rate` per second (over all shards together).
    Open {
        rate: f64,
        kind: ArrivalKind,
        burstiness: f64,
    },
    /// Requests arrive at these offsets (ns from the start), one per trace line.
    Trace { offsets_ns: Vec<u64> },
}

/// When the run ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stop {
    /// After this many measured requests (over all shards together).
    Requests(u64),
    /// No request is scheduled (open loop) or started (closed loop) after this long.
    Duration(Duration),
}

/// One slice of a sharded run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based shard index.
    pub index: u32,
    /// Number of shards.
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Self { index: 0, count: 1 }
    }
}

impl Shard {
    /// Parse `I/N` with 0 <= I < N.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("--shard expects I/N (for example 0/4), got {s:?}"))?;
        let index: u32 = i
            .trim()
            .parse()
            .map_err(|_| format!("--shard {s:?}: {i:?} is not a shard index"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("--shard {s:?}: {n:?} is not a shard count"))?;
        if count == 0 || index >= count {
            return Err(format!("--shard {s:?}: needs 0 <= I < N"));
        }
        Ok(Self { index, count })
    }

    /// Whether request `index` belongs to this shard.
    pub fn owns(&self, index: u64) -> bool {
        index % u64::from(self.count) == u64::from(self.index)
    }

    /// This shard's part of a total closed-loop concurrency (the parts add up to the total).
    pub fn concurrency(&self, total: u32) -> u32 {
        total / self.count + u32::from(self.index < total % self.count)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A validated schedule: arrivals, a stop rule and a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Stop rule.
    pub stop: Stop,
    /// Seed of the arrival draws.
    pub seed: u64,
}

/// The highest open-loop rate, req/s: a gap under a microsecond is no schedule a client keeps.
pub const MAX_RATE: f64 = 1e6;

/// The lowest open-loop rate, req/s: below a request in about 12 days the schedule leaves the ns
/// clock's 584 years.
pub const MIN_RATE: f64 = 1e-6;

/// An open-loop rate given by `--{flag}`, checked: finite, from [`MIN_RATE`] to [`MAX_RATE`]
/// req/s; the error names the flag.
pub fn check_rate(flag: &str, rate: f64) -> Result<f64, String> {
    if !rate.is_finite() || rate < MIN_RATE {
        return Err(format!(
            "--{flag} must be a number of at least 0.000001 (req/s), got {}",
            crate::plan::compact(rate)
        ));
    }
    if rate > MAX_RATE {
        return Err(format!(
            "--{flag} must be at most {MAX_RATE:.0} (req/s), got {}",
            crate::plan::compact(rate)
        ));
    }
    Ok(rate)
}

/// The most requests an open loop schedules: its arrivals are drawn whole before it starts (16
/// bytes each).
pub const MAX_OPEN_REQUESTS: u64 = 10_000_000;

/// One scheduled request: its index and its offset from the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Request index in the whole (unsharded) run.
    pub index: u64,
    /// Scheduled start, ns after the run's start.
    pub offset_ns: u64,
}

impl Schedule {
    /// Validate.
    pub fn new(arrivals: Arrivals, stop: Stop, seed: u64) -> Result<Self, String> {
        match &arrivals {
            Arrivals::Closed { concurrency } if *concurrency == 0 => {
                return Err("--concurrency must be at least 1".into())
            }
            Arrivals::Open {
                rate,
                kind,
                burstiness,
            } => {
                check_rate("request-rate", *rate)?;
                if !burstiness.is_finite() || *burstiness <= 0.0 {
                    return Err(format!(
                        "--burstiness must be a positive number, got {}",
                        crate::plan::compact(*burstiness)
                    ));
                }
                if *kind == ArrivalKind::Poisson && *burstiness != 1.0 {
                    return Err("--burstiness other than 1 needs --arrival gamma".into());
                }
                let planned = match stop {
                    Stop::Requests(n) => n as f64,
                    Stop::Duration(d) => rate * d.as_secs_f64(),
                };
                if planned > MAX_OPEN_REQUESTS as f64 {
                    return Err(format!(
                        "an open loop schedules at most {MAX_OPEN_REQUESTS} requests (its arrivals are drawn before it starts); {} req/s for this long is {}: lower --num-requests, --duration or --request-rate",
                        crate::plan::compact(*rate),
                        crate::plan::compact(planned.round())
                    ));
                }
            }
            _ => {}
        }
        match stop {
            Stop::Requests(0) => return Err("--num-requests must be at least 1".into()),
            Stop::Duration(d) if d.is_zero() => return Err("--duration must be positive".into()),
            _ => {}
        }
        Ok(Self {
            arrivals,
            stop,
            seed,
        })
    }

    /// Whether requests start at scheduled instants (open loop or trace).
    pub fn is_open(&self) -> bool {
        !matches!(self.arrivals, Arrivals::Closed { .. })
    }

    /// Every scheduled request of an open-loop or trace schedule, unsharded. Empty for a closed loop.
    pub fn slots(&self) -> Vec<Slot> {
        let limit_n = match self.stop {
            Stop::Requests(n) => n,
            Stop::Duration(_) => u64::MAX,
        };
        let limit_ns = match self.stop {
            Stop::Duration(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Stop::Requests(_) => u64::MAX,
        };
        let keep = |s: &Slot| s.index < limit_n && s.offset_ns < limit_ns;
        match &self.arrivals {
            Arrivals::Closed { .. } => Vec::new(),
            Arrivals::Trace { offsets_ns } => offsets_ns
                .iter()
                .enumerate()
                .map(|(i, &offset_ns)| Slot {
                    index: i as u64,
                    offset_ns,
                })
                .take_while(keep)
                .collect(),
            Arrivals::Open {
                rate, burstiness, ..
            } => {
                let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
                rng.set_stream(0x00a7_71a1);
                // Validated: shape and scale are positive and finite.
                let gamma = Gamma::new(*burstiness, 1.0 / (rate * burstiness)).ok();
                let mut out = Vec::new();
                let mut t = 0u64;
                let mut index = 0u64;
                loop {
                    let s = Slot {
                        index,
                        offset_ns: t,
                    };
                    if !keep(&s) {
                        break;
                    }
                    out.push(s);
                    let gap_s = gamma.as_ref().map_or(1.0 / rate, |g| g.sample(&mut rng));
                    let gap_ns = if gap_s.is_finite() && gap_s > 0.0 {
                        (gap_s * 1e9).round().min(u64::MAX as f64) as u64
                    } else {
                        0
                    };
                    t = t.saturating_add(gap_ns);
                    index += 1;
                    if t == u64::MAX {
                        break;
                    }
                }
                out
            }
        }
    }

    /// This shard's slots of an open-loop or trace schedule.
    pub fn shard_slots(&self, shard: Shard) -> Vec<Slot> {
        self.slots()
            .into_iter()
            .filter(|s| shard.owns(s.index))
            .collect()
    }

    /// The request indices a closed-loop shard runs, in order (endless with a duration stop).
    pub fn closed_indices(&self, shard: Shard) -> impl Iterator<Item = u64> {
        let limit = match self.stop {
            Stop::Requests(n) => n,
            Stop::Duration(_) => u64::MAX,
        };
        (0u64..)
            .map(move |k| {
                k.saturating_mul(u64::from(shard.count))
                    .saturating_add(u64::from(shard.index))
            })
            .take_while(move |&i| i < limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn open(rate: f64, kind: ArrivalKind, b: f64, stop: Stop, seed: u64) -> Schedule {
        Schedule::new(
            Arrivals::Open {
                rate,
                kind,
                burstiness: b,
            },
            stop,
            seed,
        )
        .unwrap()
    }

    proptest! {
        #[test]
        fn shards_partition_the_same_schedule(
            seed in any::<u64>(),
            rate in 0.5f64..500.0,
            gamma in any::<bool>(),
            b in 0.2f64..4.0,
            n in 1u64..400,
            by_duration in any::<bool>(),
            shards in 1u32..6,
        ) {
            let (kind, b) = if gamma { (ArrivalKind::Gamma, b) } else { (ArrivalKind::Poisson, 1.0) };
            let stop = if by_duration { Stop::Duration(Duration::from_millis(n * 10)) } else { Stop::Requests(n) };
            let s = open(rate, kind, b, stop, seed);
            let whole = s.slots();
            // Identical across runs.
            prop_assert_eq!(&whole, &open(rate, kind, b, stop, seed).slots());
            let mut union: Vec<Slot> = (0..shards)
                .flat_map(|i| s.shard_slots(Shard { index: i, count: shards }))
                .collect();
            union.sort_by_key(|s| s.index);
            prop_assert_eq!(&union, &whole);
            prop_assert!(whole.windows(2).all(|w| w[0].offset_ns <= w[1].offset_ns));
            // Closed loop: the shards' index sets partition the unsharded one.
            let c = Schedule::new(Arrivals::Closed { concurrency: 7 }, Stop::Requests(n), seed).unwrap();
            let mut idx: Vec<u64> = (0..shards)
                .flat_map(|i| c.closed_indices(Shard { index: i, count: shards }).collect::<Vec<_>>())
                .collect();
            idx.sort_unstable();
            prop_assert_eq!(idx, c.closed_indices(Shard::default()).collect::<Vec<_>>());
            let total: u32 = (0..shards).map(|i| Shard { index: i, count: shards }.concurrency(64)).sum();
            prop_assert_eq!(total, 64);
        }
    }

    #[test]
    fn poisson_rate_is_near_target() {
        let s = open(100.0, ArrivalKind::Poisson, 1.0, Stop::Requests(20_000), 1);
        let slots = s.slots();
        let span_s = slots.last().unwrap().offset_ns as f64 / 1e9;
        let achieved = (slots.len() - 1) as f64 / span_s;
        assert!((achieved - 100.0).abs() < 3.0, "{achieved}");
    }

    #[test]
    fn bad_input_is_rejected() {
        assert!(Shard::parse("4/4").is_err());
        assert!(Shard::parse("x/4").is_err());
        assert!(Shard::parse("1").is_err());
        assert_eq!(Shard::parse("3/4").unwrap(), Shard { index: 3, count: 4 });
        let s = |r, k, b| {
            Schedule::new(
                Arrivals::Open {
                    rate: r,
                    kind: k,
                    burstiness: b,
                },
                Stop::Requests(1),
                0,
            )
        };
        assert!(s(0.0, ArrivalKind::Poisson, 1.0).is_err());
        assert!(s(f64::NAN, ArrivalKind::Poisson, 1.0).is_err());
        // Ten requests at 1e-10 req/s would span 3,000 years: past the ns clock, and refused.
        assert!(s(1e-10, ArrivalKind::Poisson, 1.0).is_err());
        assert!(s(1e-6, ArrivalKind::Poisson, 1.0).is_ok());
        assert!(s(1.0, ArrivalKind::Poisson, 2.0).is_err());
        assert!(s(1.0, ArrivalKind::Gamma, 0.0).is_err());
        assert!(s(1.0, ArrivalKind::Gamma, 0.5).is_ok());
        assert!(Schedule::new(Arrivals::Closed { concurrency: 0 }, Stop::Requests(1), 0).is_err());
        // A gap under a microsecond, or more arrivals than are drawn before a run, is refused.
        assert!(s(1e10, ArrivalKind::Poisson, 1.0).is_err());
        assert!(s(MAX_RATE, ArrivalKind::Poisson, 1.0).is_ok());
        let open = |stop| {
            let poisson = Arrivals::Open {
                rate: 1e5,
                kind: ArrivalKind::Poisson,
                burstiness: 1.0,
            };
            Schedule::new(poisson, stop, 0)
        };
        let secs = std::time::Duration::from_secs;
        assert!(open(Stop::Duration(secs(200))).is_err());
        assert!(open(Stop::Duration(secs(100))).is_ok());
        assert!(open(Stop::Requests(MAX_OPEN_REQUESTS + 1)).is_err());
        assert!(open(Stop::Requests(MAX_OPEN_REQUESTS)).is_ok());
    }
}
