//! SGLang native `/generate`: body with `input_ids` and `sampling_params`; events with `text`,
//! `output_ids` and `meta_info` (`completion_tokens` cumulative, `cached_tokens`, `finish_reason`).

use serde_json::{json, Value};

use super::{as_u32, DecoderState};
use crate::client::RequestSpec;
use crate::prompt::Prompt;
use crate::trace::{Chunk, TokenAttribution, Usage};

/// Build the `/generate` body.
pub fn build_body(spec: &RequestSpec) -> Value {
    let mut body = json!({
        "rid": spec.rid,
        "sampling_params": {
            "max_new_tokens": spec.max_tokens,
            "ignore_eos": spec.ignore_eos,
            "temperature": 0,
        },
        "stream": true,
    });
    match &spec.prompt {
        Prompt::TokenIds(ids) => body["input_ids"] = json!(ids),
        Prompt::Text(t) => body["text"] = json!(t),
    }
    body
}

/// Finish reason as SGLang sends it: `null`, a string, or `{"type": "length", ..}`.
fn finish_reason(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("type").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

pub(crate) fn decode(v: &Value, at_ns: u64, st: &mut DecoderState) -> Chunk {
    let meta = v.get("meta_info");
    let text = v.get("text").and_then(Value::as_str).unwrap_or("");
    // Text is cumulative by default and incremental with --incremental-streaming-output.
    let text_len = if !st.prev_text.is_empty() && text.starts_with(st.prev_text.as_str()) {
        text.len() - st.prev_text.len()
    } else {
        text.len()
    };
    st.prev_text_len = text.len();
    st.prev_text = text.to_string();

    let cum = meta.and_then(|m| as_u32(m.get("completion_tokens")));
    let ids = v.get("output_ids").and_then(Value::as_array);
    let (tokens, method) = if let Some(cum) = cum {
        let t = cum.saturating_sub(st.prev_completion_tokens);
        st.prev_completion_tokens = st.prev_completion_tokens.max(cum);
        (Some(t), Some(TokenAttribution::ServerCumulative))
    } else if let Some(ids) = ids {
        let t = match (&st.prev_output_ids, st.output_ids_cumulative) {
            (None, _) => ids.len(),
            (Some(_), Some(false)) => ids.len(),
            (Some(prev), Some(true)) => ids.len().saturating_sub(prev.len()),
            (Some(prev), None) => {
                // Second event decides: a strict extension of the previous list is cumulative.
                let cumulative = ids.len() > prev.len() && ids.starts_with(prev);
                st.output_ids_cumulative = Some(cumulative);
                if cumulative {
                    ids.len() - prev.len()
                } else {
                    ids.len()
                }
            }
        };
        st.prev_output_ids = Some(ids.clone());
        (
            Some(u32::try_from(t).unwrap_or(u32::MAX)),
            Some(TokenAttribution::OutputIds),
        )
    } else {
        (None, None)
    };

    let usage = meta.map(|m| Usage {
        prompt_tokens: as_u32(m.get("prompt_tokens")),
        completion_tokens: cum,
        cached_tokens: as_u32(m.get("cached_tokens")),
    });
    let chunk = Chunk {
        at_ns,
        tokens,
        text_len: u32::try_from(text_len).unwrap_or(u32::MAX),
        usage,
        finish_reason: finish_reason(meta.and_then(|m| m.get("finish_reason"))),
        error: None,
        role_only: false,
        usage_only: false,
        content_event: false,
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
