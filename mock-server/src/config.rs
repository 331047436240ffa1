//! Simulation parameters: presets embedded from `fixtures/presets/*.toml`, overrides by TOML key.

use serde::{Deserialize, Serialize};

/// Errors raised while building or validating a [`Config`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown preset {0:?}; known presets: {1}")]
    UnknownPreset(String, String),
    #[error("preset {name}: {source}")]
    Parse {
        name: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("unknown configuration key {0:?}")]
    UnknownKey(String),
    #[error("bad value {value:?} for {key}: {reason}")]
    BadValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("preset file {path}: {reason}")]
    File { path: String, reason: String },
}

/// A number as messages show a value given: as written for everyday magnitudes, in e-notation
/// (`1e300`, `1e-7`) from a billion up and below a ten-thousandth, where the decimal form runs to
/// hundreds of digits.
pub fn compact(v: f64) -> String {
    let a = v.abs();
    if a < 1e9 && (a >= 1e-4 || a == 0.0) {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

/// Every parameter of the simulated server. TOML keys equal the field names; the CLI flags
/// are named like SGLang's server arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    // --- serving ---
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    pub model_path: String,
    pub served_model_name: String,
    pub api_key: Option<String>,
    pub debug_endpoints: bool,
    pub restart_on_oom: bool,
    /// Seconds the server answers 503 while "starting up" (at start and after an OOM restart).
    pub startup_s: f64,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    // --- randomness and time ---
    pub seed: u64,
    /// Model time runs this many times faster than real time (2.0 = twice as fast).
    pub time_scale: f64,
    // --- scheduler ---
    pub context_length: usize,
    /// Prefill tokens per pass; -1 disables chunking.
    pub chunked_prefill_size: i64,
    pub max_running_requests: usize,
    /// vLLM's scheduler: every pass decodes the running batch and prefills waiting requests in
    /// the same forward, `chunked_prefill_size` (vLLM's `max_num_batched_tokens`) bounding the
    /// pass's tokens, decode tokens first. Off: SGLang's, a prefill pass or a decode pass.
    #[serde(default)]
    pub mixed_batches: bool,
    /// SGLang's overlap scheduler on a device whose forward blocks the scheduler (the CPU
    /// backend): a pass's results are processed once the next pass has run, so its events leave
    /// when that pass ends (at once when none follows). The `/metrics` latency histograms keep
    /// the instants the tokens were drawn. Off: events leave when their own pass ends (also
    /// SGLang's overlap on a GPU, whose launches return at once).
    #[serde(default)]
    pub results_after_next_pass: bool,
    /// SGLang's admission budget: a waiting request is admitted only when the KV pool holds,
    /// beside the tokens in use, the rest of every admitted request's output (at most 4,096
    /// tokens each; a running request's times the new-token ratio unless it ignores EOS) and
    /// the request's own prompt and output. Off: one more decode step is budgeted (vLLM's,
    /// which allocates as it decodes and preempts when the pool runs out).
    #[serde(default)]
    pub reserve_output_tokens: bool,
    /// Emit a stream event every N output tokens (the last one always).
    pub stream_interval: usize,
    pub incremental_streaming_output: bool,
    pub enable_cache_report: bool,
    /// Serve `/metrics` and report the scheduler's timings in native `meta_info` (SGLang's
    /// `--enable-metrics`); without it `/metrics` is a 404, as in SGLang.
    pub enable_metrics: bool,
    pub disable_radix_cache: bool,
    // --- tokenizer / sampling ---
    pub vocab_size: u32,
    pub eos_token_id: u32,
    /// Probability that a sampled token is EOS once `min_new_tokens` are out (unless `ignore_eos`).
    pub eos_probability: f64,
    // --- GPU memory budget (per GPU, bytes) ---
    pub gpu_total_bytes: u64,
    pub weights_bytes: u64,
    pub mem_fraction_static: f64,
    /// CUDA graphs, NCCL buffers, CUDA context: taken from the non-static share.
    pub overhead_bytes: u64,
    pub kv_bytes_per_token: u64,
    /// Activation peak per token extended in a prefill pass.
    pub activation_bytes_per_extend_token: f64,
    /// Activation peak per token of context the pass attends over (context before + chunk).
    pub activation_bytes_per_context_token: f64,
    /// Allocator fragmentation per context token, added to every peak unless `expandable_segments`.
    pub fragmentation_bytes_per_context_token: f64,
    pub expandable_segments: bool,
    // --- cost model (seconds of model time) ---
    pub prefill_base_s: f64,
    pub prefill_per_token_s: f64,
    /// Attention cost per (new token x context token) pair.
    pub prefill_per_token_pair_s: f64,
    pub decode_base_s: f64,
    /// Per token of context summed over the batch.
    pub decode_per_context_token_s: f64,
    /// Per request in the batch, raised to `decode_batch_exponent`.
    pub decode_per_request_s: f64,
    /// The batch's request cost grows as batch^exponent: 1 is linear; below 1 the step grows
    /// more slowly than the batch, as GPU steps do where a larger batch fills the same kernels
    /// (and a mixture of experts reads each expert once however many requests chose it).
    #[serde(default = "default_decode_batch_exponent")]
    pub decode_batch_exponent: f64,
    /// Output processing per request after a pass (detokenizing, the HTTP server's per-stream
    /// work): the j-th stream event of a pass leaves `j x output_per_request_s` after the pass.
    #[serde(default)]
    pub output_per_request_s: f64,
    /// Real seconds, not model time: the shortest time between two wake-ups of the output
    /// stage on the real clock. Events due within it leave together, up to this late (the ground
    /// truth records when each left); 0 wakes up for every event. The paused test clock ignores it.
    #[serde(default = "default_output_tick_s")]
    pub output_tick_s: f64,
    /// Model seconds added to every stream event's instant: the constant way in and out of a
    /// request that is not prefill (tokenizing, the server's internal hops, HTTP). It shifts TTFT
    /// and the end of a stream, never the gaps between events or the scheduler.
    #[serde(default)]
    pub stream_latency_s: f64,
    // --- speculative decoding ---
    /// "none", "EAGLE" or "DFLASH".
    pub speculative_algorithm: String,
    pub speculative_num_draft_tokens: usize,
    /// Probability that draft position i is accepted given that positions before it were.
    pub spec_accept_rates: Vec<f64>,
    /// Verify steps after a request's first token that accept no draft: prompt-lookup (n-gram)
    /// drafts find nothing to propose until the output repeats (vLLM's `ngram`). Default 0.
    #[serde(default)]
    pub spec_warmup_steps: usize,
    /// The share of requests whose warm-up is i verify steps, i = 0, 1, ...: given, each request
    /// draws its own warm-up from it (scaled to sum 1) and `spec_warmup_steps` is unused. Prompt
    /// lookup finds its first match after a number of steps that differs from request to request.
    /// Default empty.
    #[serde(default)]
    pub spec_warmup_shares: Vec<f64>,
    /// The first chunk carries the prefill's one token and no draft; verify steps start with the
    /// first decode step (vLLM's). Off, the first token's step accepts drafts as any other, so a
    /// first chunk carries several tokens (SGLang's EAGLE and DFlash). Default false.
    #[serde(default)]
    pub spec_first_token_alone: bool,
    // --- a table twin's discrepancy (read by `bench-client predict`; the mock serves the model) ---
    /// Each fitted table row's measured closed-loop means over the model's. Default empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discrepancy: Vec<Discrepancy>,
}

/// One fitted table row: its shape and its measured mean TTFT and TPOT over the model's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Discrepancy {
    pub isl: u32,
    pub osl: u32,
    pub concurrency: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot: Option<f64>,
}

fn default_decode_batch_exponent() -> f64 {
    1.0
}

fn default_output_tick_s() -> f64 {
    0.00025
}

const PRESETS: &[(&str, &str)] = &[
    (
        "small-cpu-demo",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/presets/small-cpu-demo.toml"
        )),
    ),
    (
        "kimi-k2.6-dflash-8xrtx-pro-6000",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/presets/kimi-k2.6-dflash-8xrtx-pro-6000.toml"
        )),
    ),
    (
        "qwen3-32b-h100-tp2-sglang",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/presets/qwen3-32b-h100-tp2-sglang.toml"
        )),
    ),
    (
        "llama-3.1-70b-fp8-h200-tp2-vllm",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/presets/llama-3.1-70b-fp8-h200-tp2-vllm.toml"
        )),
    ),
];
const PRESET_NAMES: &[&str] = &[
    "small-cpu-demo",
    "kimi-k2.6-dflash-8xrtx-pro-6000",
    "qwen3-32b-h100-tp2-sglang",
    "llama-3.1-70b-fp8-h200-tp2-vllm",
];

impl Default for Config {
    fn default() -> Self {
        Self::default()
    }
}

impl Config {
    /// Loads a preset by name.
    pub fn preset(name: &str) -> Result<Config, ConfigError> {
        let text = PRESETS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| ConfigError::UnknownPreset(name.to_string(), PRESET_NAMES.join(", ")))?;
        toml::from_str(text).map_err(|source| ConfigError::Parse {
            name: name.to_string(),
            source,
        })
    }

    /// Loads a preset file: every key known and every value possible (the key named when not),
    /// checked by [`Config::validate_preset`].
    pub fn preset_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let file = |reason: String| ConfigError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
        let c: Config = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map_or(0, |sp| text[..sp.start].lines().count().max(1));
            file(format!("line {line}: {}", e.message()))
        })?;
        c.validate_preset().map_err(|e| file(e.to_string()))?;
        Ok(c)
    }

    /// [`Config::validate`], and the KV pool holds one request of `context_length` tokens: a
    /// preset that cannot serve its own longest request is a mistake, not a what-if.
    pub fn validate_preset(&self) -> Result<(), ConfigError> {
        self.validate()?;
        let pool = self.kv_pool_tokens();
        if pool < self.context_length {
            return Err(ConfigError::Invalid(format!(
                "the KV pool holds {pool} tokens (gpu_total_bytes, mem_fraction_static, weights_bytes, kv_bytes_per_token), fewer than one request of context_length {}",
                self.context_length
            )));
        }
        Ok(())
    }

    /// Names accepted by [`Config::preset`].
    pub fn preset_names() -> &'static [&'static str] {
        PRESET_NAMES
    }

    /// The decode step's cost of a batch of `requests` beside its context:
    /// `decode_per_request_s x requests^decode_batch_exponent`.
    pub fn decode_batch_cost_s(&self, requests: usize) -> f64 {
        let b = requests as f64;
        let b = if self.decode_batch_exponent == 1.0 {
            b
        } else {
            b.powf(self.decode_batch_exponent)
        };
        self.decode_per_request_s * b
    }

    /// The `small-cpu-demo` preset.
    #[allow(clippy::should_implement_trait)]
    #[allow(clippy::expect_used)]
    pub fn default() -> Config {
        // The preset is compiled in and covered by a unit test, so this cannot fail at run time.
        Config::preset("small-cpu-demo").expect("embedded small-cpu-demo preset parses")
    }

    /// Overrides one field by its TOML key; the value is parsed as TOML (bare strings allowed).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |reason: String| ConfigError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            reason,
        };
        let mut table = toml::Table::try_from(&*self).map_err(|e| bad(e.to_string()))?;
        let known = table.contains_key(key) || matches!(key, "api_key");
        if !known {
            return Err(ConfigError::UnknownKey(key.to_string()));
        }
        let parsed: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {value}")) {
            Ok(mut t) => t
                .remove("v")
                .unwrap_or(toml::Value::String(value.to_string())),
            Err(_) => toml::Value::String(value.to_string()),
        };
        // Integers are accepted where floats are expected.
        let parsed = match (table.get(key), parsed) {
            (Some(toml::Value::Float(_)), toml::Value::Integer(i)) => toml::Value::Float(i as f64),
            (
                Some(toml::Value::String(_)),
                v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_)),
            ) => toml::Value::String(v.to_string()),
            (_, v) => v,
        };
        table.insert(key.to_string(), parsed);
        let next: Config = table
            .try_into()
            .map_err(|e: toml::de::Error| bad(e.message().to_string()))?;
        *self = next;
        Ok(())
    }

    /// Checks every parameter, including SGLang's refusal when the KV pool would be empty.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let inv = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if !(self.mem_fraction_static > 0.0 && self.mem_fraction_static < 1.0) {
            return inv("mem_fraction_static must be in (0, 1)");
        }
        if !(1e-3..=1e6).contains(&self.time_scale) {
            return inv("time_scale must be in [0.001, 1e6]");
        }
        if self.context_length < 2 {
            return inv("context_length must be at least 2");
        }
        if self.chunked_prefill_size == 0 || self.chunked_prefill_size < -1 {
            return inv("chunked_prefill_size must be positive or -1 (disabled)");
        }
        if self.max_running_requests == 0 {
            return inv("max_running_requests must be at least 1");
        }
        if self.stream_interval == 0 {
            return inv("stream_interval must be at least 1");
        }
        for d in &self.discrepancy {
            let ratio = |r: Option<f64>| r.is_none_or(discrepancy_ratio_ok);
            if d.isl == 0 || d.osl == 0 || d.concurrency == 0 || !ratio(d.ttft) || !ratio(d.tpot) {
                let show = |r: Option<f64>| r.map_or("none".to_string(), |r| r.to_string());
                return Err(ConfigError::Invalid(format!(
                    "discrepancy row isl {} osl {} concurrency {} (ttft {}, tpot {}): isl, osl and concurrency must be at least 1, ttft and tpot ratios in [0.001, 1000]",
                    d.isl, d.osl, d.concurrency, show(d.ttft), show(d.tpot)
                )));
            }
        }
        if self.kv_bytes_per_token == 0 || self.vocab_size < 2 {
            return inv("kv_bytes_per_token and vocab_size must be positive");
        }
        if !(0.0..=1.0).contains(&self.eos_probability) {
            return inv("eos_probability must be in [0, 1]");
        }
        if !(self.decode_batch_exponent > 0.0 && self.decode_batch_exponent <= 2.0) {
            return inv("decode_batch_exponent must be in (0, 2]");
        }
        let costs = [
            ("prefill_base_s", self.prefill_base_s),
            ("prefill_per_token_s", self.prefill_per_token_s),
            ("prefill_per_token_pair_s", self.prefill_per_token_pair_s),
            ("decode_base_s", self.decode_base_s),
            (
                "decode_per_context_token_s",
                self.decode_per_context_token_s,
            ),
            ("decode_per_request_s", self.decode_per_request_s),
            ("output_per_request_s", self.output_per_request_s),
            ("output_tick_s", self.output_tick_s),
            ("stream_latency_s", self.stream_latency_s),
            (
                "activation_bytes_per_extend_token",
                self.activation_bytes_per_extend_token,
            ),
            (
                "activation_bytes_per_context_token",
                self.activation_bytes_per_context_token,
            ),
            (
                "fragmentation_bytes_per_context_token",
                self.fragmentation_bytes_per_context_token,
            ),
            ("startup_s", self.startup_s),
        ];
        if let Some((key, v)) = costs.iter().find(|(_, c)| !c.is_finite() || *c < 0.0) {
            return Err(ConfigError::Invalid(format!(
                "{key} = {}: cost-model and activation parameters must be finite and non-negative",
                compact(*v)
            )));
        }
        // Past these no server runs (an hour a pass, a second a token): a value past one is a
        // unit slip, and the costliest pass stays inside the engine's clock.
        let ceilings = [
            ("prefill_base_s", self.prefill_base_s, 3600.0),
            ("prefill_per_token_s", self.prefill_per_token_s, 1.0),
            (
                "prefill_per_token_pair_s",
                self.prefill_per_token_pair_s,
                1e-6,
            ),
            ("decode_base_s", self.decode_base_s, 3600.0),
            (
                "decode_per_context_token_s",
                self.decode_per_context_token_s,
                1e-3,
            ),
            ("decode_per_request_s", self.decode_per_request_s, 60.0),
            ("output_per_request_s", self.output_per_request_s, 60.0),
            ("output_tick_s", self.output_tick_s, 3600.0),
            ("stream_latency_s", self.stream_latency_s, 3600.0),
            ("startup_s", self.startup_s, 3600.0),
        ];
        if let Some((key, v, most)) = ceilings.iter().find(|(_, v, most)| v > most) {
            return Err(ConfigError::Invalid(format!(
                "{key} = {} s is past any server's ({most} s at most): is it in seconds?",
                compact(*v)
            )));
        }
        match self.speculative_algorithm.to_ascii_uppercase().as_str() {
            "NONE" | "" => {}
            "EAGLE" | "EAGLE3" | "DFLASH" => {
                if self.speculative_num_draft_tokens == 0 {
                    return inv("speculative_num_draft_tokens must be at least 1");
                }
                if self
                    .spec_accept_rates
                    .iter()
                    .any(|p| !(0.0..=1.0).contains(p))
                {
                    return inv("spec_accept_rates must lie in [0, 1]");
                }
                let shares = &self.spec_warmup_shares;
                if shares.iter().any(|w| !(w.is_finite() && *w >= 0.0))
                    || (!shares.is_empty() && shares.iter().sum::<f64>() <= 0.0)
                {
                    return inv(
                        "spec_warmup_shares must be finite and non-negative, and not all 0",
                    );
                }
            }
            other => {
                return Err(ConfigError::Invalid(format!(
                    "unknown speculative_algorithm {other:?} (none, EAGLE, DFLASH)"
                )))
            }
        }
        if self.kv_pool_tokens() == 0 {
            // SGLang's model_runner raises this when the KV pool would be empty.
            return inv("Not enough memory. Please try to increase --mem-fraction-static.");
        }
        Ok(())
    }

    /// A model duration of `secs` on the engine's clock (`time_scale` faster), never negative.
    pub fn scaled(&self, secs: f64) -> std::time::Duration {
        // A validated configuration keeps every event far inside this; past it, the clock's end.
        const LONGEST_S: f64 = 1e9;
        let s = secs / self.time_scale;
        std::time::Duration::from_secs_f64(if s.is_nan() {
            0.0
        } else {
            s.clamp(0.0, LONGEST_S)
        })
    }

    /// What a run on a preset fitted to a table should know (`None` for another preset): the
    /// mock serves its model alone, without the rows' discrepancy that `bench-client predict`
    /// applies, and past the rows' reach (in flight, input and output tokens) the model
    /// extrapolates: there the knee rests on a KV pool and a running cap that rows which never
    /// queued cannot show.
    pub fn fitted_rows_note(&self) -> Option<String> {
        let rows = &self.discrepancy;
        let most = |of: fn(&Discrepancy) -> u32| rows.iter().map(of).max();
        let (c, i, o) = (most(|d| d.concurrency)?, most(|d| d.isl)?, most(|d| d.osl)?);
        Some(format!(
            "this preset's {} fitted rows (up to {c} in flight, {i} tokens in, {o} out) measured \
             TTFT and TPOT apart from its model (its discrepancy): the mock serves the model alone, \
             `bench-client predict` applies them; past those rows the model extrapolates (docs/twin.md)",
            rows.len()
        ))
    }

    /// The way in and out (`stream_latency_s`) on the engine's clock, in ns, as every event
    /// takes it: outside the server's own timing, as SGLang's `first_token_latency` is taken in
    /// its tokenizer manager, before the HTTP response.
    pub fn way_ns(&self) -> u64 {
        u64::try_from(self.scaled(self.stream_latency_s).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Bytes of one GPU's static pool (weights and KV cache): total x `mem_fraction_static`.
    pub fn static_bytes(&self) -> f64 {
        (self.gpu_total_bytes as f64 * self.mem_fraction_static).max(0.0)
    }

    /// Tokens the KV pool holds: (static pool - weights) / KV bytes per token.
    pub fn kv_pool_tokens(&self) -> usize {
        let kv_bytes = (self.static_bytes() - self.weights_bytes as f64).max(0.0);
        (kv_bytes / self.kv_bytes_per_token.max(1) as f64).floor() as usize
    }

    /// Whether speculative decoding is on.
    pub fn speculative(&self) -> bool {
        let a = self.speculative_algorithm.as_str();
        !(a.is_empty() || a.eq_ignore_ascii_case("none"))
    }
}

/// The farthest a fitted row's measured time may lie from its model's (a factor either way): a
/// row a thousand times off is one the model cannot reach, not a correction to carry.
pub const DISCREPANCY_MOST: f64 = 1e3;

/// Whether a discrepancy ratio is one a preset holds (within [`DISCREPANCY_MOST`] either way).
pub fn discrepancy_ratio_ok(r: f64) -> bool {
    (1.0 / DISCREPANCY_MOST..=DISCREPANCY_MOST).contains(&r)
}

/// SGLang's length checks against the context length `ctx`: a prompt of `prompt` tokens, and
/// room for `max_new` more.
pub fn check_lengths(ctx: usize, prompt: usize, max_new: usize) -> Result<(), String> {
    if prompt == 0 {
        return Err("the prompt is empty: at least one input token is required".into());
    }
    if prompt >= ctx {
        return Err(format!(
            "The input ({prompt} tokens) is longer than the model's context length ({ctx} tokens)."
        ));
    }
    if prompt.saturating_add(max_new) > ctx {
        return Err(format!(
            "Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested a total of {} tokens: {prompt} tokens from the input messages and {max_new} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
            prompt.saturating_add(max_new),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
