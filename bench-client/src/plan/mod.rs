//! The plan: what to send and when, before anything is sent. Request specs and deadlines, prompts
//! (token ids, or text through a tokenizer), sweep contexts, load schedules, workloads and traces,
//! multi-turn sessions.

pub mod contexts;
pub mod duration;
pub mod list;
pub mod prompt;
mod request;
pub mod schedule;
pub mod session;
#[cfg(feature = "tokenizer")]
pub mod tokenizer;
pub mod trace;
pub mod workload;

/// The seed of schedules and prompts when none is given.
pub const DEFAULT_SEED: u64 = 0x5eed;

/// The most tokens a length may give (a prompt, an output, a context, a trace's request): 2^24.
/// A prompt is built whole, four bytes a token, and no served model's context is longer.
pub const MAX_TOKENS: u32 = 1 << 24;

/// The longest time a flag or a trace may give: 30 days (a run, a wait or a timeout past it is a
/// typo, and an instant that far ahead overflows the clock).
pub const MAX_FLAG_SECS: f64 = 30.0 * 86_400.0;

pub use mock_server::config::compact;

pub use contexts::{parse_contexts, ContextsError, DEFAULT_CONTEXTS};
pub use prompt::{Prompt, PromptGen, DEFAULT_ID_RANGE};
pub use request::{RequestSpec, StreamCaps, TimeoutPhase, Timeouts};
pub use schedule::{ArrivalKind, Arrivals, Schedule, Shard, Slot, Stop};
pub use session::{Conversation, PlannedTurn, SessionPlan, Sessions, ThinkTime, TurnOutput};
pub use trace::{Trace, TraceEntry, TraceError, TraceFormat, TraceOptions};
pub use workload::{LenDist, Planner, Workload};
