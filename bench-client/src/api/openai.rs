//! OpenAI `/v1/completions` (token-id or text prompt) and the shared decoding of OpenAI stream chunks
//! (completions and chat): `choices[0].text` / `delta.content`, vLLM `token_ids`, continuous usage.

use serde_json::{json, Value};

use super::chunk::ServerTiming;
use super::event::Event;
use super::DecoderState;
use super::{Chunk, TokenAttribution};
use crate::plan::prompt::Prompt;
use crate::plan::RequestSpec;

/// Fields every OpenAI-style streaming body carries.
pub(crate) fn common_fields(spec: &RequestSpec, model: Option<&str>) -> Value {
    let mut body = json!({
        "max_tokens": spec.max_tokens,
        "stream": true,
        "stream_options": { "include_usage": true, "continuous_usage_stats": true },
        "ignore_eos": spec.ignore_eos,
        "rid": spec.rid,
        "temperature": 0,
    });
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    if spec.return_token_ids {
        body["return_token_ids"] = json!(true);
    }
    body
}

/// Build the `/v1/completions` body.
pub fn build_body(spec: &RequestSpec, model: Option<&str>) -> Value {
    let mut body = common_fields(spec, model);
    body["prompt"] = match &spec.prompt {
        Prompt::TokenIds(ids) => json!(ids),
        Prompt::Text(t) => json!(t),
    };
    body
}

pub(crate) fn decode(ev: &Event, at_ns: u64, st: &mut DecoderState, chat: bool) -> Chunk {
    let usage = ev.usage.clone();
    let Some(choice) = &ev.choice else {
        // A usage-only chunk (`choices: []`) carries no output tokens.
        if let Some(c) = usage.as_ref().and_then(|u| u.completion_tokens) {
            st.prev_completion_tokens = st.prev_completion_tokens.max(c);
        }
        return Chunk {
            at_ns,
            tokens: Some(0),
            usage,
            usage_only: true,
            server_timing: ServerTiming::prefill_ms(ev.timings_prompt_ms).map(std::sync::Arc::new),
            ..Chunk::default()
        };
    };
    let (text_len, role_only, content_event) = if chat {
        let delta = &choice.delta;
        let len = delta.content.unwrap_or(0) + delta.reasoning_content.unwrap_or(0);
        let ids_empty = choice.token_ids.is_none_or(|n| n == 0);
        let role_only = delta.has_role && len == 0 && ids_empty;
        (len, role_only, delta.content.is_some() && !role_only)
    } else {
        (choice.text.unwrap_or(0), false, choice.text.is_some())
    };
    let finish_reason = choice.finish_reason.clone();

    let cum = usage.as_ref().and_then(|u| u.completion_tokens);
    let (tokens, method) = if let Some(ids) = choice.token_ids {
        if let Some(c) = cum {
            st.prev_completion_tokens = st.prev_completion_tokens.max(c);
        }
        (
            Some(u32::try_from(ids).unwrap_or(u32::MAX)),
            Some(TokenAttribution::TokenIds),
        )
    } else if let Some(c) = cum {
        let t = c.saturating_sub(st.prev_completion_tokens);
        st.prev_completion_tokens = st.prev_completion_tokens.max(c);
        (Some(t), Some(TokenAttribution::ContinuousUsage))
    } else if role_only {
        (Some(0), None)
    } else {
        (None, None)
    };
    match tokens {
        None => st.methods.push(None),
        Some(t) if t > 0 => st.methods.push(method),
        Some(_) => {}
    }
    Chunk {
        at_ns,
        tokens,
        text_len: u32::try_from(text_len).unwrap_or(u32::MAX),
        usage,
        finish_reason: finish_reason.map(Into::into),
        error: None,
        role_only,
        usage_only: false,
        server_timing: ServerTiming::prefill_ms(ev.timings_prompt_ms).map(std::sync::Arc::new),
        content_event,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Decoded, Dialect};

    fn run(d: Dialect, events: &[&str]) -> (Vec<Chunk>, TokenAttribution) {
        let mut dec = d.decoder();
        let mut out = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if let Decoded::Chunk(c) = dec.decode(e, i as u64) {
                out.push(c);
            }
        }
        (out, dec.attribution())
    }

    #[test]
    fn continuous_usage_multi_token_first_chunk() {
        let (c, a) = run(
            Dialect::OpenAi,
            &[
                r#"{"choices":[{"index":0,"text":"abc","finish_reason":null}],"usage":{"prompt_tokens":10,"completion_tokens":3}}"#,
                r#"{"choices":[{"index":0,"text":"d","finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":4}}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}"#,
                "[DONE]",
            ],
        );
        assert_eq!(
            c.iter().map(|c| c.tokens).collect::<Vec<_>>(),
            vec![Some(3), Some(1), Some(0)]
        );
        assert!(c[2].usage_only && !c[2].carries_output());
        assert_eq!(c[2].usage.as_ref().and_then(|u| u.cached_tokens), Some(0));
        assert_eq!(a, TokenAttribution::ContinuousUsage);
    }

    #[test]
    fn skip_tokenizer_init_empty_text_counts_from_token_ids() {
        let (c, a) = run(
            Dialect::OpenAi,
            &[
                r#"{"choices":[{"index":0,"text":"","token_ids":[4,5]}]}"#,
                r#"{"choices":[{"index":0,"text":"","token_ids":[6]}]}"#,
            ],
        );
        assert!(c.iter().all(Chunk::carries_output));
        assert_eq!(c[0].tokens, Some(2));
        assert_eq!(a, TokenAttribution::TokenIds);
    }

    #[test]
    fn empty_text_without_counts_still_marks_the_first_token() {
        // vLLM --skip-tokenizer-init without stream_options: events with "text": "" and no counts.
        let (c, a) = run(
            Dialect::OpenAi,
            &[
                r#"{"choices":[{"index":0,"text":"","finish_reason":null}]}"#,
                r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#,
            ],
        );
        assert!(c.iter().all(|c| c.tokens.is_none() && c.carries_output()));
        assert_eq!(a, TokenAttribution::Unknown);
        // A chat finish chunk with an empty delta carries nothing.
        let (c, _) = run(
            Dialect::OpenAiChat,
            &[r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#],
        );
        assert!(!c[0].carries_output());
    }

    #[test]
    fn final_usage_only_gives_unknown_attribution() {
        let (c, a) = run(
            Dialect::OpenAi,
            &[
                r#"{"choices":[{"index":0,"text":"hi"}]}"#,
                r#"{"choices":[{"index":0,"text":" there","finish_reason":"length"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            ],
        );
        assert_eq!(c[0].tokens, None);
        assert!(c[0].carries_output());
        assert_eq!(a, TokenAttribution::Unknown);
    }

    #[test]
    fn chat_role_only_chunk_is_not_output() {
        let (c, a) = run(
            Dialect::OpenAiChat,
            &[
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":{"prompt_tokens":5,"completion_tokens":0}}"#,
                r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
            ],
        );
        assert!(c[0].role_only && !c[0].carries_output());
        assert_eq!(c[1].tokens, Some(2));
        assert_eq!(a, TokenAttribution::ContinuousUsage);
    }

    #[test]
    fn vllm_style_error_object() {
        let (c, _) = run(
            Dialect::OpenAi,
            &[r#"{"object":"error","message":"context too long","type":"BadRequestError"}"#],
        );
        assert_eq!(c[0].error.as_deref(), Some("context too long"));
    }

    #[test]
    fn body_shape() {
        let spec = RequestSpec::new("r9", Prompt::TokenIds(vec![1, 2, 3]), 4);
        let b = build_body(&spec, Some("m"));
        assert_eq!(b["prompt"], json!([1, 2, 3]));
        assert_eq!(b["model"], "m");
        assert_eq!(b["stream_options"]["continuous_usage_stats"], true);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["rid"], "r9");
    }
}
