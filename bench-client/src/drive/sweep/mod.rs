//! Context sweep: for each context length, warm-up requests, then isolated streaming requests (and the
//! two-point pair when asked), each record appended to the results file at once; health checks after
//! failures, `--on-crash wait|stop`, `--resume`, Ctrl-C.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use indicatif::ProgressBar;

use super::Destination;
use crate::measure::{basics, two_point, TwoPointError};
use crate::net::stamped::Stamping;
use crate::net::{self, Target};
use crate::plan::prompt::{Prompt, PromptGen};
use crate::plan::{RequestSpec, Timeouts};
use crate::results::manifest::{Manifest, PromptSettings, SweepSettings, TimeoutsS};
use crate::results::{read_records, Method, Record, RecordWriter, TwoPointDetail};
use crate::trace::Dialect;
use crate::trace::FailureKind;

mod order;
use order::{plan, Step};

/// What to do when the server goes down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnCrash {
    /// Wait for `/health` to answer again (up to a limit), then go on.
    Wait,
    /// Stop the sweep cleanly.
    Stop,
}

/// A validated sweep.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// Context lengths, in tokens.
    pub contexts: Vec<u32>,
    /// Output tokens per streaming request.
    pub output_tokens: u32,
    /// Measured runs per context.
    pub runs: u32,
    /// Warm-up requests per context (not recorded).
    pub warmup: u32,
    /// Runs go round-robin over the contexts (each context's warm-up before its first run), so
    /// that a drift of the server falls on every context alike; else context by context.
    pub interleave: bool,
    /// Also run the two-point method beside the streaming one.
    pub method: Method,
    /// Flush the prefix cache before each point (and between the two-point requests).
    pub flush_cache: bool,
    /// Two-point output lengths a and b.
    pub two_point_tokens: (u32, u32),
    /// Results file (JSONL).
    pub out: PathBuf,
    /// Skip points already measured in `out`.
    pub resume: bool,
    /// Prompt seed.
    pub seed: u64,
    /// Token id range of prompts, `[min, max)`.
    pub token_id_range: (u32, u32),
    /// Ask for per-chunk token ids (vLLM).
    pub return_token_ids: bool,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// Where reads take their stamps from (kernel receive timestamps unless on a paused clock).
    pub stamping: Stamping,
    /// Crash policy.
    pub on_crash: OnCrash,
    /// How long to wait for a crashed server.
    pub crash_wait: Duration,
    /// Draw a progress bar (only on a terminal).
    pub progress: bool,
    /// Command line, for the manifest.
    pub command: String,
    /// The run is simulated: the embedded mock on a paused clock (said in the manifest).
    pub simulated: bool,
}

/// Warm-up requests before each context length when none are asked for.
pub const DEFAULT_WARMUP: u32 = 1;
/// Measured runs per context length when none are asked for.
pub const DEFAULT_RUNS: u32 = 3;
/// Output tokens per streaming request when none are asked for.
pub const DEFAULT_OUTPUT_TOKENS: u32 = 64;
/// The two-point method's output lengths a and b when none are asked for.
pub const DEFAULT_TWO_POINT_TOKENS: (u32, u32) = (1, 17);
/// How long `--on-crash wait` waits for a crashed server when not asked, seconds.
pub const DEFAULT_CRASH_WAIT_S: f64 = 600.0;

impl SweepConfig {
    /// A streaming sweep into `out` with the command line's defaults: the default contexts,
    /// [`DEFAULT_OUTPUT_TOKENS`], [`DEFAULT_RUNS`] and [`DEFAULT_WARMUP`] per context, the default
    /// seed, kernel stamps, default deadlines, stop on a crash, no progress bar.
    pub fn new(out: PathBuf) -> Self {
        Self {
            contexts: crate::plan::parse_contexts(crate::plan::DEFAULT_CONTEXTS)
                .unwrap_or_default(),
            output_tokens: DEFAULT_OUTPUT_TOKENS,
            runs: DEFAULT_RUNS,
            warmup: DEFAULT_WARMUP,
            interleave: false,
            method: Method::Streaming,
            flush_cache: false,
            two_point_tokens: DEFAULT_TWO_POINT_TOKENS,
            out,
            resume: false,
            seed: crate::plan::DEFAULT_SEED,
            token_id_range: crate::plan::DEFAULT_ID_RANGE,
            return_token_ids: false,
            timeouts: Timeouts::default(),
            stamping: Stamping::Kernel,
            on_crash: OnCrash::Stop,
            crash_wait: Duration::from_secs_f64(DEFAULT_CRASH_WAIT_S),
            progress: false,
            command: String::new(),
            simulated: false,
        }
    }
}

impl SweepConfig {
    /// Checks everything a sweep needs before anything is sent or started (the target aside): the
    /// run counts, the two-point lengths, the prompt id range, and that `out` holds no results
    /// unless resumed. A sweep runs only from what this returns.
    pub fn validate(&self) -> anyhow::Result<Checked> {
        if self.runs == 0 {
            anyhow::bail!("--runs must be at least 1");
        }
        if self.output_tokens == 0 {
            anyhow::bail!("--output-tokens must be at least 1");
        }
        let (a, b) = self.two_point_tokens;
        if self.method == Method::TwoPoint && (a == 0 || b <= a) {
            anyhow::bail!("--two-point-a and --two-point-b need 0 < a < b (got a={a}, b={b})");
        }
        let (lo, hi) = self.token_id_range;
        let prompts = PromptGen::with_range(self.seed, lo, hi).map_err(anyhow::Error::msg)?;
        let resumed = crate::results::existing_results(&self.out, self.resume, "")?;
        Ok(Checked { prompts, resumed })
    }
}

/// A sweep's configuration as [`SweepConfig::validate`] found it.
#[derive(Debug)]
pub struct Checked {
    prompts: PromptGen,
    /// `out` held results and `--resume` continues them: the points measured there are skipped.
    resumed: bool,
}

/// Where a sweep's prompts come from.
#[derive(Clone, Debug, Default)]
pub enum PromptSource {
    /// Random token ids; for the text-only openai-chat dialect, words of about one token each (the
    /// server's reported `prompt_tokens` is then the true length).
    #[default]
    Default,
    /// Text of exactly N tokens under a local tokenizer, for every dialect.
    #[cfg(feature = "tokenizer")]
    Tokenizer(std::sync::Arc<crate::plan::tokenizer::TextPrompts>),
}

impl PromptSource {
    /// What the prompts are, as the manifest records it: `token-ids`, `text-words` (about N tokens)
    /// or `text-tokenizer` (exactly N tokens under the tokenizer, before any template or BOS token
    /// the server adds).
    pub fn kind(&self, dialect: Dialect) -> &'static str {
        match self {
            Self::Default if dialect == Dialect::OpenAiChat => "text-words",
            Self::Default => "token-ids",
            #[cfg(feature = "tokenizer")]
            Self::Tokenizer(_) => "text-tokenizer",
        }
    }

    /// The tokenizer file, if any.
    pub fn tokenizer_path(&self) -> Option<String> {
        match self {
            Self::Default => None,
            #[cfg(feature = "tokenizer")]
            Self::Tokenizer(t) => Some(t.path().display().to_string()),
        }
    }
}

/// What a sweep did.
#[derive(Debug)]
pub struct SweepOutcome {
    /// Records written by this invocation.
    pub records: Vec<Record>,
    /// Points skipped because `--resume` found them done.
    pub skipped: usize,
    /// Why the sweep stopped early, if it did.
    pub stopped: Option<String>,
    /// Ctrl-C ended the sweep.
    pub interrupted: bool,
    /// The results file.
    pub out: PathBuf,
    /// On the engine path, the model time the sweep took.
    pub model_time: Option<Duration>,
}

struct Runner<'a> {
    cfg: &'a SweepConfig,
    target: &'a Target,
    http: net::Http,
    /// The engine path's server, when the sweep runs there.
    #[cfg(feature = "embedded-mock")]
    engine: Option<super::engine::EngineServer>,
    prompts: PromptGen,
    source: PromptSource,
    nonce: u64,
    counter: u64,
}

impl Runner<'_> {
    async fn next_spec(&mut self, context: u32, max_tokens: u32) -> anyhow::Result<RequestSpec> {
        self.counter += 1;
        let index = (self.nonce << 40) | self.counter;
        let prompt = match &self.source {
            #[cfg(feature = "tokenizer")]
            PromptSource::Tokenizer(t) => {
                // Encoding a long text takes a while: off the async threads.
                let t = t.clone();
                let text = tokio::task::spawn_blocking(move || t.text(context, index))
                    .await
                    .context("building a text prompt")?
                    .map_err(anyhow::Error::msg)?;
                Prompt::Text(text)
            }
            PromptSource::Default if self.target.dialect == Dialect::OpenAiChat => {
                Prompt::Text(self.prompts.text(context, index))
            }
            PromptSource::Default => Prompt::TokenIds(self.prompts.token_ids(context, index)),
        };
        let mut spec = RequestSpec::new(
            format!("bc-{:x}-{}-{}", self.cfg.seed, self.nonce, self.counter),
            prompt,
            max_tokens,
        );
        spec.return_token_ids = self.cfg.return_token_ids;
        Ok(spec)
    }

    fn key(&self) -> Option<&str> {
        self.target.api_key.as_deref()
    }

    /// Sends one request to the server (or the engine path's) and returns its trace.
    async fn send(&mut self, spec: &RequestSpec) -> crate::trace::RequestTrace {
        #[cfg(feature = "embedded-mock")]
        if let Some(e) = &mut self.engine {
            return e.send(spec, &self.cfg.timeouts);
        }
        net::send(&self.http, self.target, spec, &self.cfg.timeouts).await
    }

    async fn flush(&mut self) -> Result<(), String> {
        #[cfg(feature = "embedded-mock")]
        if let Some(e) = &mut self.engine {
            return e.flush_cache();
        }
        net::flush_cache(&self.http, &self.target.base_url, self.key()).await
    }

    async fn health(&self) -> bool {
        #[cfg(feature = "embedded-mock")]
        if let Some(e) = &self.engine {
            return e.healthy();
        }
        net::health(&self.http, &self.target.base_url, self.key()).await
    }

    /// Waits `d`: on the engine path the virtual clock moves on.
    async fn pause(&mut self, d: Duration) {
        #[cfg(feature = "embedded-mock")]
        if let Some(e) = &mut self.engine {
            e.sleep(d);
            return;
        }
        tokio::time::sleep(d).await;
    }

    async fn streaming(&mut self, context: u32, run: u32) -> anyhow::Result<Record> {
        let spec = self.next_spec(context, self.cfg.output_tokens).await?;
        if self.cfg.flush_cache {
            if let Err(e) = self.flush().await {
                tracing::warn!("{e}");
            }
        }
        let trace = self.send(&spec).await;
        Ok(Record::streaming(trace, context, run))
    }

    async fn two_point(&mut self, context: u32, run: u32) -> anyhow::Result<Record> {
        let (na, nb) = self.cfg.two_point_tokens;
        let spec_a = self.next_spec(context, na).await?;
        if self.cfg.flush_cache {
            if let Err(e) = self.flush().await {
                tracing::warn!("{e}");
            }
        }
        let mut spec_b = spec_a.clone();
        spec_b.max_tokens = nb;
        spec_b.rid = format!("{}-b", spec_a.rid);
        let a = self.send(&spec_a).await;
        let mut detail = TwoPointDetail {
            a_tokens: na,
            b_tokens: nb,
            t_a_ms: Some(basics(&a).e2e_ms),
            t_b_ms: None,
            cached_tokens_b: None,
            flushed: false,
            trace_a: None,
            trace_b: None,
        };
        if self.cfg.flush_cache && a.failure().is_none() {
            if let Err(message) = self.flush().await {
                detail.trace_a = Some(a);
                return Ok(Record::two_point(
                    Err(TwoPointError::FlushRefused { message }),
                    detail,
                    context,
                    run,
                ));
            }
            detail.flushed = true;
        }
        let b = self.send(&spec_b).await;
        let result = two_point(&a, &b);
        detail.t_b_ms = Some(basics(&b).e2e_ms);
        detail.cached_tokens_b = b.cached_tokens();
        detail.trace_a = Some(a);
        detail.trace_b = Some(b);
        Ok(Record::two_point(result, detail, context, run))
    }

    /// After a failure that suggests a crash: is the server back (possibly after waiting)?
    async fn server_is_up(&mut self, bar: &ProgressBar) -> bool {
        if self.health().await {
            return true;
        }
        if self.cfg.on_crash == OnCrash::Stop {
            return false;
        }
        bar.set_message(format!(
            "server down; waiting up to {:?} for /health",
            self.cfg.crash_wait
        ));
        let mut waited = Duration::ZERO;
        while waited < self.cfg.crash_wait {
            self.pause(Duration::from_secs(1)).await;
            waited += Duration::from_secs(1);
            if self.health().await {
                return true;
            }
        }
        false
    }
}

fn is_down(rec: &Record) -> bool {
    let kind = rec.error.as_ref().and_then(|e| e.kind.request());
    let tp_kind = rec
        .two_point
        .as_ref()
        .and_then(|d| d.trace_b.as_ref().or(d.trace_a.as_ref()))
        .and_then(|t| t.failure())
        .map(|f| f.kind);
    kind.or(tp_kind)
        .is_some_and(|k: FailureKind| k.server_may_be_down())
}

/// Run the sweep against `server`, appending each record to `cfg.out` as it finishes.
pub async fn run_sweep(server: &Destination, cfg: &SweepConfig) -> anyhow::Result<SweepOutcome> {
    run_sweep_with(server, cfg, cfg.validate()?, PromptSource::Default).await
}

/// The vocabulary size a server's `/server_info` reports (`vocab_size`), if any.
fn server_vocabulary(info: Option<&serde_json::Value>) -> Option<u32> {
    let v = info?.get("vocab_size")?.as_u64()?;
    u32::try_from(v).ok().filter(|&v| v > 0)
}

/// [`run_sweep`] of a sweep already checked (`checked`, from `cfg.validate()`), with prompts from
/// `source`.
pub async fn run_sweep_with(
    server: &Destination,
    cfg: &SweepConfig,
    checked: Checked,
    source: PromptSource,
) -> anyhow::Result<SweepOutcome> {
    let Checked { prompts, resumed } = checked;
    // One writer per results file, taken before the file is read and anything is sent.
    let _lock = crate::results::lock_results(&cfg.out)?;
    // Checked again under the lock: another writer may have filled the file since `validate`.
    let resumed = resumed || crate::results::existing_results(&cfg.out, cfg.resume, "")?;
    let mut done: HashSet<(Method, u32, u32)> = HashSet::new();
    if resumed {
        for r in read_records(&cfg.out)? {
            if !r.failed() {
                done.insert(r.point_key());
            }
        }
    }
    let http =
        net::http_client_with(&cfg.timeouts, cfg.stamping).context("building the HTTP client")?;
    // A fresh random salt per invocation (recorded in the manifest): prompts stay unique across
    // invocations against a server whose prefix cache is still warm from an earlier run with the
    // same seed. 24 bits, because the request counter takes the low 40 bits of the prompt stream.
    let nonce = u64::from(rand::random::<u32>() & 0x00ff_ffff);
    let target = &server.target;
    let key = target.api_key.as_deref();
    #[cfg(feature = "embedded-mock")]
    let engine = match &server.engine {
        Some(c) => Some(super::engine::EngineServer::new(c.clone())?),
        None => None,
    };
    #[cfg(feature = "embedded-mock")]
    let server_info = match &engine {
        Some(e) => Some(e.server_info()),
        None => net::server_info(&http, &target.base_url, key).await,
    };
    #[cfg(not(feature = "embedded-mock"))]
    let server_info = net::server_info(&http, &target.base_url, key).await;
    let manifest = Manifest {
        command: cfg.command.clone(),
        simulated: Some(cfg.simulated),
        client_version: env!("CARGO_PKG_VERSION").to_string(),
        started_unix_s: Some(net::unix::unix_s_now()),
        url: Some(target.shown_url()),
        dialect: Some(target.dialect),
        model: target.model.clone(),
        server_info: server_info.clone(),
        seed: Some(cfg.seed),
        invocation: Some(nonce),
        settings: Some(SweepSettings {
            contexts: cfg.contexts.clone(),
            output_tokens: cfg.output_tokens,
            runs: cfg.runs,
            warmup: cfg.warmup,
            interleave: cfg.interleave,
            method: Some(cfg.method),
            flush_cache: cfg.flush_cache,
            two_point_tokens: [cfg.two_point_tokens.0, cfg.two_point_tokens.1],
            token_id_range: [cfg.token_id_range.0, cfg.token_id_range.1],
            prompt: PromptSettings {
                kind: source.kind(target.dialect).to_string(),
                tokenizer: source.tokenizer_path(),
            },
            resume: cfg.resume,
            on_crash: format!("{:?}", cfg.on_crash).to_lowercase(),
            stamping: Some(cfg.stamping),
            timeouts_s: TimeoutsS {
                connect: cfg.timeouts.connect.as_secs_f64(),
                first_token_base: cfg.timeouts.first_token_base.as_secs_f64(),
                first_token_per_1k: cfg.timeouts.first_token_per_1k.as_secs_f64(),
                idle: cfg.timeouts.idle.as_secs_f64(),
                total: cfg.timeouts.total.as_secs_f64(),
            },
        }),
        ..Manifest::default()
    };
    // The results file (and its folder) first: the manifest lives beside it.
    let mut writer = RecordWriter::open(&cfg.out)?;
    crate::results::append_manifest(&cfg.out, &manifest)?;
    // A server that reports its vocabulary (the mock does) lets every prompt begin with an id of
    // its own out of the whole vocabulary, not only out of the prompt id range.
    let prompts = match server_vocabulary(server_info.as_ref()) {
        Some(v) => prompts.with_vocabulary(v),
        None => prompts,
    };
    let mut runner = Runner {
        cfg,
        target,
        http,
        #[cfg(feature = "embedded-mock")]
        engine,
        prompts,
        source,
        nonce,
        counter: 0,
    };
    let (steps, skipped) = plan(cfg, &done);
    let total = skipped as u64
        + steps
            .iter()
            .filter(|(_, s)| matches!(s, Step::Measure(..)))
            .count() as u64;
    let bar = super::progress::bar(Some(total), cfg.progress);
    bar.inc(skipped as u64);
    let mut outcome = SweepOutcome {
        records: Vec::new(),
        skipped,
        stopped: None,
        interrupted: false,
        out: cfg.out.clone(),
        model_time: None,
    };
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    'outer: for (context, step) in steps {
        let (method, run) = match step {
            Step::Warmup(w) => {
                bar.set_message(format!(
                    "{context} tokens: warm-up {}/{}",
                    w + 1,
                    cfg.warmup
                ));
                let spec = tokio::select! {
                    s = runner.next_spec(context, cfg.output_tokens) => s?,
                    _ = &mut ctrl_c => { outcome.interrupted = true; break 'outer; }
                };
                let trace = tokio::select! {
                    t = runner.send(&spec) => t,
                    _ = &mut ctrl_c => { outcome.interrupted = true; break 'outer; }
                };
                if let Some(f) = trace.failure() {
                    tracing::warn!("warm-up at {context} tokens failed: {}", f.message);
                }
                continue;
            }
            Step::Measure(method, run) => (method, run),
        };
        bar.set_message(format!(
            "{context} tokens, run {}, {}",
            run + 1,
            method.as_str()
        ));
        let rec = tokio::select! {
            r = async {
                match method {
                    Method::Streaming => runner.streaming(context, run).await,
                    Method::TwoPoint => runner.two_point(context, run).await,
                }
            } => r,
            _ = &mut ctrl_c => { outcome.interrupted = true; break 'outer; }
        }?;
        writer.append(&rec)?;
        bar.inc(1);
        let msg = match (&rec.error, rec.ttft_ms, rec.decode_tok_s) {
            (Some(e), _, _) => format!("{context}: {} {}", e.kind, rec.method.as_str()),
            (None, Some(t), Some(d)) => {
                format!("{context}: TTFT {t:.1} ms, decode {d:.1} tok/s")
            }
            (None, Some(t), None) => format!("{context}: TTFT {t:.1} ms"),
            _ => format!("{context}: {}", rec.method.as_str()),
        };
        bar.set_message(msg);
        if rec.contaminated {
            tracing::warn!(
                "point {context} tokens run {run} contaminated: {}",
                rec.contamination.join("; ")
            );
        }
        let down = is_down(&rec);
        let message = rec.error.as_ref().map(|e| e.message.clone());
        outcome.records.push(rec);
        if down && !runner.server_is_up(&bar).await {
            let kept = read_records(&cfg.out)
                .map(|r| r.iter().filter(|r| !r.failed()).count())
                .unwrap_or(0);
            outcome.stopped = Some(format!(
                "the server stopped answering at {context} tokens ({}); {kept} measured points are kept in {}; start the server again and rerun with --resume to continue",
                message.unwrap_or_default(),
                cfg.out.display()
            ));
            break 'outer;
        }
    }
    bar.finish_and_clear();
    #[cfg(feature = "embedded-mock")]
    if let Some(e) = &runner.engine {
        outcome.model_time = Some(Duration::from_nanos(e.now_ns()));
    }
    Ok(outcome)
}
