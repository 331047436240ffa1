//! SGLang native `/generate`: body with `input_ids` and `sampling_params`; events with `text`,
//! `output_ids` and `meta_info` (`completion_tokens` cumulative, `cached_tokens`, `finish_reason`).

use serde_json::{json, Value};

use super::event::{Event, OutputIds};
use super::DecoderState;
use super::{Chunk, ServerTiming, TokenAttribution, Usage};
use crate::plan::prompt::Prompt;
use crate::plan::RequestSpec;

/// Build the `/generate` body.
pub fn build_body(spec: &RequestSpec) -> Value {
    let mut body = fields(spec);
    match &spec.prompt {
        Prompt::TokenIds(ids) => body["input_ids"] = json!(ids),
        Prompt::Text(t) => body["text"] = json!(t),
    }
    body
}

/// The `/generate` body's fields other than the prompt.
pub(crate) fn fields(spec: &RequestSpec) -> Value {
    json!({
        "rid": spec.rid,
        "sampling_params": {
            "max_new_tokens": spec.max_tokens,
            "ignore_eos": spec.ignore_eos,
            "temperature": 0,
        },
        "stream": true,
    })
}

pub(crate) fn decode(ev: Event, at_ns: u64, st: &mut DecoderState) -> Chunk {
    let meta = ev.meta_info.as_ref();
    let text = ev.text.as_deref().unwrap_or("");
    // Text is cumulative by default and incremental with --incremental-streaming-output.
    let extends = !st.prev_text.is_empty() && text.starts_with(st.prev_text.as_str());
    let text_len = if extends {
        text.len() - st.prev_text.len()
    } else {
        text.len()
    };
    st.prev_text_len = text.len();
    // Cumulative text only grows: keep the previous text and append what is new.
    if extends {
        st.prev_text.push_str(&text[st.prev_text.len()..]);
    } else {
        st.prev_text.clear();
        st.prev_text.push_str(text);
    }

    let cum = meta.and_then(|m| m.completion_tokens);
    let (tokens, method) = if let Some(cum) = cum {
        let t = cum.saturating_sub(st.prev_completion_tokens);
        st.prev_completion_tokens = st.prev_completion_tokens.max(cum);
        (Some(t), Some(TokenAttribution::ServerCumulative))
    } else if let Some(ids) = &ev.output_ids {
        let n = ids.len();
        let t = match (st.prev_output_ids_len, st.output_ids_cumulative) {
            (None, _) => n,
            (Some(_), Some(false)) => n,
            (Some(prev), Some(true)) => n.saturating_sub(prev),
            (Some(prev), None) => {
                // Second event decides: a strict extension of the previous list is cumulative. The
                // elements were collected because the question was still open.
                let cumulative = n > prev
                    && match ids {
                        OutputIds::Values(v) => v.starts_with(&st.prev_output_ids),
                        OutputIds::Count(_) => false,
                    };
                st.output_ids_cumulative = Some(cumulative);
                if cumulative {
                    n - prev
                } else {
                    n
                }
            }
        };
        st.prev_output_ids_len = Some(n);
        st.prev_output_ids.clear();
        if st.output_ids_cumulative.is_none() {
            if let OutputIds::Values(v) = ids {
                st.prev_output_ids.extend_from_slice(v);
            }
        }
        (
            Some(u32::try_from(t).unwrap_or(u32::MAX)),
            Some(TokenAttribution::OutputIds),
        )
    } else {
        (None, None)
    };

    let usage = meta.map(|m| Usage {
        prompt_tokens: m.prompt_tokens,
        completion_tokens: cum,
        cached_tokens: m.cached_tokens,
    });
    let server_timing =
        meta.and_then(|m| ServerTiming::reported(m.queue_time, m.first_token_latency));
    let chunk = Chunk {
        at_ns,
        tokens,
        text_len: u32::try_from(text_len).unwrap_or(u32::MAX),
        usage,
        finish_reason: ev.meta_info.and_then(|m| m.finish_reason).map(Into::into),
        error: None,
        role_only: false,
        usage_only: false,
        content_event: false,
        server_timing: server_timing.map(std::sync::Arc::new),
    };
    match tokens {
        None => st.methods.push(None),
        Some(t) if t > 0 => st.methods.push(method),
        Some(_) => {}
    }
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Decoded, Dialect};

    fn chunks(events: &[&str]) -> (Vec<Chunk>, TokenAttribution) {
        let mut d = Dialect::Sglang.decoder();
        let mut out = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if let Decoded::Chunk(c) = d.decode(e, i as u64) {
                out.push(c);
            }
        }
        (out, d.attribution())
    }

    #[test]
    fn cumulative_completion_tokens_give_deltas() {
        let (c, a) = chunks(&[
            r#"{"text":"ab","output_ids":[1,2,3],"meta_info":{"id":"x","prompt_tokens":8,"completion_tokens":3,"cached_tokens":0,"finish_reason":null}}"#,
            r#"{"text":"abcd","output_ids":[1,2,3,4],"meta_info":{"prompt_tokens":8,"completion_tokens":4,"cached_tokens":0,"finish_reason":{"type":"length","length":4}}}"#,
            "[DONE]",
        ]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].tokens, Some(3));
        assert_eq!(c[1].tokens, Some(1));
        assert_eq!(c[1].text_len, 2);
        assert_eq!(c[1].finish_reason.as_deref(), Some("length"));
        assert_eq!(a, TokenAttribution::ServerCumulative);
    }

    #[test]
    fn incremental_output_ids_detected() {
        let (c, a) = chunks(&[
            r#"{"text":"a","output_ids":[7,8]}"#,
            r#"{"text":"b","output_ids":[9]}"#,
            r#"{"text":"c","output_ids":[7]}"#,
        ]);
        assert_eq!(
            c.iter().map(|c| c.tokens).collect::<Vec<_>>(),
            vec![Some(2), Some(1), Some(1)]
        );
        assert_eq!(a, TokenAttribution::OutputIds);
    }

    #[test]
    fn cumulative_output_ids_detected() {
        let (c, _) = chunks(&[
            r#"{"text":"a","output_ids":[7,8]}"#,
            r#"{"text":"ab","output_ids":[7,8,9]}"#,
            r#"{"text":"abc","output_ids":[7,8,9,7,7]}"#,
        ]);
        assert_eq!(
            c.iter().map(|c| c.tokens).collect::<Vec<_>>(),
            vec![Some(2), Some(1), Some(2)]
        );
    }

    #[test]
    fn in_band_error() {
        let (c, _) = chunks(&[r#"{"error":{"message":"CUDA out of memory"}}"#]);
        assert_eq!(c[0].error.as_deref(), Some("CUDA out of memory"));
        assert!(!c[0].carries_output());
    }

    #[test]
    fn garbage_is_an_error_chunk_not_a_panic() {
        let (c, _) = chunks(&["{not json"]);
        assert!(c[0].error.is_some());
    }

    #[test]
    fn body_shape() {
        let spec = RequestSpec::new("r1", Prompt::TokenIds(vec![5, 6]), 17);
        let b = build_body(&spec);
        assert_eq!(b["input_ids"], json!([5, 6]));
        assert_eq!(b["sampling_params"]["max_new_tokens"], 17);
        assert_eq!(b["sampling_params"]["ignore_eos"], true);
        assert_eq!(b["rid"], "r1");
        assert_eq!(b["stream"], true);
    }
}
