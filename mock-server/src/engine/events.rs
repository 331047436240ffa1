//! What goes in and out of the engine: a validated request, and the events it sends to the
//! request's stream (tokens, an error, or the server's death).

use crate::truth::FinishTruth;
use tokio::time::Instant;

/// The token ids of one stream event: held inline up to four (a speculative step's usual
/// yield), so that an event allocates nothing.
pub type EventIds = smallvec::SmallVec<[u32; 4]>;

/// A validated generation request.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub rid: String,
    /// The prompt, shared with the cache nodes that hold its ranges.
    pub input_ids: crate::radix::Tokens,
    pub max_new_tokens: usize,
    pub min_new_tokens: usize,
    pub ignore_eos: bool,
    pub stop_token_ids: Vec<u32>,
    /// The instant the HTTP handler received the request.
    pub received: Instant,
    /// When the request's last bytes reached the server's socket (kernel receive timestamp), in ns
    /// since the Unix epoch; `None` where unknown.
    pub arrived_unix_ns: Option<u64>,
}

/// Why a request finished.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    Length(usize),
    Stop(u32),
}

impl From<&Finish> for FinishTruth {
    fn from(f: &Finish) -> Self {
        match f {
            Finish::Length(_) => FinishTruth::Length,
            Finish::Stop(_) => FinishTruth::Stop,
        }
    }
}

/// Speculative-decoding statistics reported on the final event.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeculativeStats {
    pub verify_ct: usize,
    pub accept_length: f64,
    pub accept_rate: f64,
    pub histogram: Vec<u64>,
}

/// The scheduler's own timings of a request, as SGLang reports them with `--enable-metrics`:
/// ns since the request was received, on the same clock as `at_ns`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestTimes {
    /// When the request first entered a forward batch (left the waiting queue).
    pub forward_entry_ns: Option<u64>,
    /// When its prompt's prefill first finished.
    pub prefill_finished_ns: Option<u64>,
    /// How often it was retracted under KV pressure.
    pub retractions: u32,
}

/// What the engine sends to a request's HTTP stream.
#[derive(Debug, Clone)]
pub enum StreamEvent {
    Tokens {
        /// Index of this chunk in the request's ground truth.
        chunk: usize,
        /// When the engine handed the event over, in ns since the request was received.
        at_ns: u64,
        new_ids: EventIds,
        prompt_tokens: usize,
        cached_tokens: usize,
        completion_tokens: usize,
        finish: Option<Finish>,
        /// Boxed: only a final event carries it, and every event is moved a few times.
        speculative: Option<Box<SpeculativeStats>>,
        times: RequestTimes,
    },
    Error(String),
    /// The server died; the stream must be cut without `[DONE]`.
    Crash(String),
}
