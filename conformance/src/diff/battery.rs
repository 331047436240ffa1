//! The battery of the differential check: one list of requests sent alike to a real server and to
//! the mock. It holds the recorded SGLang cases (streams in both dialects, plain requests, usage
//! options, logprobs, the prefix cache, in-band errors, 400s, info endpoints) and the mock's matrix
//! of malformed input. Prompts are token ids drawn inside every test model's vocabulary: an id at
//! or above it, or a negative one, kills SGLang's scheduler and the whole server (the mock does the
//! same, and its own tests hold it), so the battery has none.

use bench_client::plan::prompt::PromptGen;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One request of the battery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Unique, stable name (the key of the known-differences list).
    pub name: String,
    /// `GET` or `POST`.
    pub method: String,
    pub path: String,
    /// The JSON body as sent (a string, so malformed bodies can be sent too); `None` for a GET.
    pub body: Option<String>,
    /// Send the request twice and compare the second answer (the prefix cache's case).
    #[serde(default)]
    pub repeat: bool,
}

impl Case {
    fn post(name: &str, path: &str, body: Value) -> Case {
        Case::raw(name, path, &body.to_string())
    }
    fn raw(name: &str, path: &str, body: &str) -> Case {
        Case {
            name: name.into(),
            method: "POST".into(),
            path: path.into(),
            body: Some(body.into()),
            repeat: false,
        }
    }
    fn get(name: &str, path: &str) -> Case {
        Case {
            name: name.into(),
            method: "GET".into(),
            path: path.into(),
            body: None,
            repeat: false,
        }
    }
    fn repeated(mut self) -> Case {
        self.repeat = true;
        self
    }

    /// Whether the case is an info endpoint (compared, but not a per-request response).
    pub fn is_info(&self) -> bool {
        self.method == "GET"
    }
}

/// What the battery's requests are built from.
#[derive(Debug, Clone)]
pub struct BatteryOptions {
    pub model: String,
    /// Prompt length of the ordinary cases.
    pub prompt_tokens: u32,
    /// Longer than the server's context length (the too-long cases).
    pub too_long_tokens: u32,
    /// Output tokens per request.
    pub max_tokens: u32,
    /// Seed of the prompts: a new seed per run keeps the server's prefix cache out of it.
    pub seed: u64,
}

/// The whole battery, in a fixed order.
pub fn battery(o: &BatteryOptions) -> Vec<Case> {
    let gen = PromptGen::new(o.seed);
    let mut n = 0u64;
    let mut ids = |len: u32| {
        n += 1;
        gen.token_ids(len, n)
    };
    let (model, p, mt) = (o.model.as_str(), o.prompt_tokens, o.max_tokens);
    let comp = |prompt: Vec<u32>, extra: Value| {
        let mut b = json!({"model": model, "prompt": prompt, "max_tokens": mt, "temperature": 0,
            "ignore_eos": true, "stream": true});
        merge(&mut b, extra);
        b
    };
    let native = |prompt: Vec<u32>, extra: Value, sampling: Value| {
        let mut s = json!({"max_new_tokens": mt, "temperature": 0, "ignore_eos": true});
        merge(&mut s, sampling);
        let mut b = json!({"input_ids": prompt, "sampling_params": s, "stream": true});
        merge(&mut b, extra);
        b
    };
    let usage = json!({"stream_options": {"include_usage": true}});
    let cont = json!({"stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let c = "/v1/completions";
    let g = "/generate";
    vec![
        Case::post("plain", c, comp(ids(p), json!({}))),
        Case::post("include_usage", c, comp(ids(p), usage.clone())),
        Case::post("continuous_usage", c, comp(ids(p), cont)),
        Case::post(
            "completion_not_streamed",
            c,
            comp(ids(p), json!({"stream": false})),
        ),
        Case::post("prefix_cache_repeat", c, comp(ids(p), usage.clone())).repeated(),
        Case::post(
            "bad_request",
            c,
            comp(ids(p), json!({"max_tokens": 100_000})),
        ),
        Case::post(
            "too_long_prompt",
            c,
            comp(ids(o.too_long_tokens), json!({})),
        ),
        Case::post("max_tokens_zero", c, comp(ids(p), json!({"max_tokens": 0}))),
        Case::post(
            "max_tokens_zero_plain",
            c,
            comp(ids(p), json!({"max_tokens": 0, "stream": false})),
        ),
        Case::post(
            "bad_temperature",
            c,
            comp(ids(p), json!({"temperature": -1})),
        ),
        Case::post(
            "max_tokens_not_a_number",
            c,
            json!({"model": model, "prompt": "a", "max_tokens": "many"}),
        ),
        Case::post(
            "prompt_not_a_prompt",
            c,
            json!({"model": model, "prompt": {"x": 1}}),
        ),
        Case::raw("completions_malformed_json", c, "{not json"),
        Case::post("native_cumulative", g, native(ids(p), json!({}), json!({}))),
        Case::post(
            "native_logprobs",
            g,
            native(ids(p), json!({"return_logprob": true}), json!({})),
        ),
        Case::post(
            "native_plain_json",
            g,
            native(ids(p), json!({"stream": false}), json!({})),
        ),
        Case::post(
            "native_cache_repeat",
            g,
            native(ids(p), json!({}), json!({})),
        )
        .repeated(),
        Case::post(
            "native_bad_max_new_tokens",
            g,
            native(ids(p), json!({}), json!({"max_new_tokens": -1})),
        ),
        Case::post(
            "native_bad_max_new_tokens_plain",
            g,
            native(
                ids(p),
                json!({"stream": false}),
                json!({"max_new_tokens": -1}),
            ),
        ),
        Case::post(
            "native_too_long_prompt",
            g,
            native(ids(o.too_long_tokens), json!({}), json!({})),
        ),
        Case::post(
            "native_too_long_prompt_plain",
            g,
            native(ids(o.too_long_tokens), json!({"stream": false}), json!({})),
        ),
        Case::raw("native_malformed_json", g, "{not json"),
        Case::post("native_text_not_a_string", g, json!({"text": 5})),
        Case::post(
            "native_text_and_input_ids",
            g,
            // Without `ignore_eos` the random test model may stop at EOS before `max_new_tokens`.
            json!({"text": "a", "input_ids": [101], "sampling_params": {"ignore_eos": true}}),
        ),
        Case::post(
            "native_input_ids_not_a_list",
            g,
            json!({"input_ids": "1 2"}),
        ),
        Case::post("native_body_not_an_object", g, json!([1, 2])),
        Case::post(
            "chat",
            "/v1/chat/completions",
            json!({"model": model, "messages": [{"role": "user", "content": "hello there"}],
                "max_tokens": mt, "temperature": 0, "ignore_eos": true, "stream": true,
                "stream_options": {"include_usage": true}}),
        ),
        Case::post(
            "chat_empty_messages",
            "/v1/chat/completions",
            json!({"model": model, "messages": []}),
        ),
        Case::post("unknown_path", "/nope", json!({})),
        Case::get("info_health", "/health"),
        Case::get("info_get_model_info", "/get_model_info"),
        Case::get("info_server_info", "/server_info"),
        Case::get("info_v1_models", "/v1/models"),
        Case::get("info_metrics", "/metrics"),
        // Last: the server is idle, so both flush (SGLang answers both methods alike).
        Case::post("flush_cache_post", "/flush_cache", json!({})),
        Case::get("flush_cache_get", "/flush_cache"),
    ]
}

/// `extra`'s fields over `base`'s (both objects).
fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_names_are_unique_and_prompts_differ() {
        let o = BatteryOptions {
            model: "m".into(),
            prompt_tokens: 50,
            too_long_tokens: 5000,
            max_tokens: 8,
            seed: 3,
        };
        let b = battery(&o);
        let mut names: Vec<&str> = b.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
        let bodies: Vec<&String> = b.iter().filter_map(|c| c.body.as_ref()).collect();
        let plain = bodies[0];
        assert!(bodies[1..].iter().all(|x| *x != plain));
    }
}
