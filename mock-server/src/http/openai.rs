//! The OpenAI dialect's JSON (`/v1/completions`, `/v1/chat/completions`).

use super::render::{sse, Collected, Dialect, Renderer};
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

impl Renderer {
    /// The `usage` object: prompt, completion and total tokens, and cached tokens when reported.
    pub(super) fn usage(&self, completion: usize, cached: usize) -> Value {
        let details = if self.cache_report {
            json!({"cached_tokens": cached})
        } else {
            Value::Null
        };
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
               "total_tokens": self.prompt_tokens + completion, "prompt_tokens_details": details})
    }

    /// One streamed chunk carrying `new_ids`.
    pub(super) fn openai_chunk(
        &self,
        new_ids: &[u32],
        completion: usize,
        cached: usize,
        finish: &Option<Finish>,
    ) -> Value {
        let text = tokenizer::decode(new_ids);
        let usage = if self.continuous_usage {
            self.usage(completion, cached)
        } else {
            Value::Null
        };
        match self.dialect {
            Dialect::Chat => {
                json!({"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{"index": 0, "delta": {"content": text},
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
    pub(super) fn openai_final_chunks(
        &self,
        out: &mut Vec<Bytes>,
        completion: usize,
        cached: usize,
        finish: &Option<Finish>,
    ) {
        if self.dialect == Dialect::Chat {
            let usage = if self.continuous_usage {
                self.usage(completion, cached)
            } else {
                Value::Null
            };
            out.push(sse(&json!({"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{"index": 0, "delta": {}, "logprobs": null,
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
    pub(super) fn openai_response(&self, c: &Collected) -> Value {
        let Collected {
            ids,
            cached,
            finish,
            ..
        } = c;
        let text = tokenizer::decode(ids);
        let usage = self.usage(ids.len(), *cached);
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
        "choices": [choice], "usage": usage})
    }
}
