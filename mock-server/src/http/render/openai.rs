//! The OpenAI dialect's JSON (`/v1/completions`, `/v1/chat/completions`).

use super::{sse, Collected, Dialect, RenderOptions};
use crate::engine::Finish;
use crate::tokenizer;
use axum::body::Bytes;
use serde_json::{json, Value};

/// The finish reason as OpenAI names it (`null` while running).
fn finish_str(f: &Option<Finish>) -> Value {
    match f {
        None => Value::Null,
        Some(Finish::Length(_)) => json!("length"),
        Some(Finish::Stop(_)) => json!("stop"),
    }
}

/// The stop token that ended the request, if one did.
fn matched(f: &Option<Finish>) -> Value {
    match f {
        Some(Finish::Stop(t)) => json!(t),
        _ => Value::Null,
    }
}

impl RenderOptions {
    /// The `usage` object of a response's end (the usage chunk, the non-streamed answer):
    /// prompt, completion and total tokens, cached tokens when reported, SGLang's
    /// `reasoning_tokens`, and chat's `completion_tokens_details`.
    pub(in crate::http) fn usage(&self, completion: usize, cached: usize) -> Value {
        let details = if self.cache_report {
            json!({"cached_tokens": cached})
        } else {
            Value::Null
        };
        let mut u = json!({"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + completion,
               "completion_tokens": completion, "prompt_tokens_details": details, "reasoning_tokens": 0});
        if self.dialect == Dialect::Chat {
            u["completion_tokens_details"] = Value::Null;
        }
        u
    }

    /// The `usage` of every chunk under `continuous_usage_stats`: as SGLang 0.5.23 sends it, no
    /// cached-token details until the usage chunk.
    fn running_usage(&self, completion: usize) -> Value {
        json!({"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + completion,
               "completion_tokens": completion, "prompt_tokens_details": null, "reasoning_tokens": 0,
               "completion_tokens_details": null})
    }

    /// The chunk that opens a chat stream: the assistant's role, no content yet.
    pub(in crate::http) fn chat_opening(&self) -> Value {
        json!({"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "choices": [{"index": 0, "delta": {"reasoning_content": null, "role": "assistant", "content": ""},
            "logprobs": null, "finish_reason": null, "matched_stop": null}], "usage": null})
    }

    /// One streamed chunk carrying `new_ids`.
    pub(in crate::http) fn openai_chunk(
        &self,
        new_ids: &[u32],
        completion: usize,
        finish: &Option<Finish>,
    ) -> Value {
        let text = tokenizer::decode(new_ids);
        let usage = if self.continuous_usage {
            self.running_usage(completion)
        } else {
            Value::Null
        };
        match self.dialect {
            Dialect::Chat => {
                json!({"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{"index": 0, "delta": {"reasoning_content": null, "content": text},
                "logprobs": null, "finish_reason": null, "matched_stop": null}], "usage": usage})
            }
            _ => {
                json!({"id": self.rid, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish_str(finish),
                "matched_stop": matched(finish)}], "usage": usage})
            }
        }
    }

    /// The chunks after the final token chunk: chat's empty delta with the finish reason, and
    /// the usage-only chunk when `include_usage` asked for it.
    pub(in crate::http) fn openai_final_chunks(
        &self,
        out: &mut Vec<Bytes>,
        completion: usize,
        cached: usize,
        finish: &Option<Finish>,
    ) {
        if self.dialect == Dialect::Chat {
            let usage = if self.continuous_usage {
                self.running_usage(completion)
            } else {
                Value::Null
            };
            out.push(sse(&json!({"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{"index": 0, "delta": {"reasoning_content": null}, "logprobs": null,
                "finish_reason": finish_str(finish), "matched_stop": matched(finish)}], "usage": usage})));
        }
        if self.include_usage {
            let obj = if self.dialect == Dialect::Chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            out.push(sse(
                &json!({"id": self.rid, "object": obj, "created": self.created, "model": self.model,
                "choices": [], "usage": self.usage(completion, cached)}),
            ));
        }
    }

    /// The whole (non-streamed) answer.
    pub(in crate::http) fn openai_response(&self, c: &Collected) -> Value {
        let Collected {
            ids,
            cached,
            finish,
            ..
        } = c;
        let text = tokenizer::decode(ids);
        let mut usage = self.usage(ids.len(), *cached);
        usage["completion_tokens_details"] = Value::Null;
        let choice = if self.dialect == Dialect::Chat {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null,
                   "finish_reason": finish_str(finish), "matched_stop": matched(finish)})
        } else {
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish_str(finish),
                   "matched_stop": matched(finish)})
        };
        let obj = if self.dialect == Dialect::Chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        json!({"id": self.rid, "object": obj, "created": self.created, "model": self.model,
        "choices": [choice], "usage": usage, "metadata": {"weight_version": "default",
        "weight_versions": [{"version": "default", "start": 0, "end": ids.len()}]}})
    }
}
