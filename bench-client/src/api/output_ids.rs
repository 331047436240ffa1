//! The output token ids of one stream, kept only for requests that send them back (multi-turn
//! sessions): every other request counts ids without keeping them.
//!
//! Where each dialect lists them: SGLang's native `output_ids` (cumulative by default, only the new
//! ids with `--incremental-streaming-output`); vLLM's `choices[0].token_ids` with
//! `return_token_ids` (the new ids of each chunk). llama.cpp and SGLang list none on
//! `/v1/completions`; a stream without ids gives `None`.

use serde::Deserialize;

use super::Dialect;

/// SGLang's `meta_info`: the running output count tells a cumulative list from a new-ids one.
#[derive(Deserialize)]
struct Meta {
    completion_tokens: Option<u32>,
}

/// The fields of an event that list ids; any other field is skipped, and an event whose ids or
/// count have another type lists none.
#[derive(Deserialize)]
struct Event {
    output_ids: Option<Vec<u32>>,
    meta_info: Option<Meta>,
    choices: Option<Vec<Choice>>,
}

#[derive(Deserialize)]
struct Choice {
    token_ids: Option<Vec<u32>>,
}

/// Collects the output ids of one stream, event by event.
#[derive(Clone, Debug)]
pub struct OutputIdsKeeper {
    dialect: Dialect,
    ids: Vec<u32>,
    /// Some event listed ids.
    listed: bool,
}

impl OutputIdsKeeper {
    /// A keeper for one stream of `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            ids: Vec::new(),
            listed: false,
        }
    }

    /// One event's data (`[DONE]` and undecodable events list nothing).
    pub fn push(&mut self, data: &str) {
        let Ok(ev) = serde_json::from_str::<Event>(data.trim()) else {
            return;
        };
        match self.dialect {
            Dialect::Sglang => {
                let Some(list) = ev.output_ids else { return };
                let count = ev.meta_info.and_then(|m| m.completion_tokens);
                // A cumulative list is as long as the running count; a list of new ids is shorter
                // after the first event. Without a count, a list that extends the ids so far is
                // taken as cumulative.
                let cumulative = match count {
                    Some(c) => list.len() == c as usize,
                    None => list.len() > self.ids.len() && list.starts_with(&self.ids),
                };
                if cumulative || !self.listed {
                    self.ids = list;
                } else {
                    self.ids.extend_from_slice(&list);
                }
                self.listed = true;
            }
            Dialect::OpenAi | Dialect::OpenAiChat => {
                let first = ev.choices.and_then(|c| c.into_iter().next());
                if let Some(ids) = first.and_then(|c| c.token_ids) {
                    self.ids.extend_from_slice(&ids);
                    self.listed = true;
                }
            }
        }
    }

    /// The stream's output ids, `None` when no event listed any.
    pub fn finish(self) -> Option<Vec<u32>> {
        self.listed.then_some(self.ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(dialect: Dialect, events: &[&str]) -> Option<Vec<u32>> {
        let mut k = OutputIdsKeeper::new(dialect);
        for e in events {
            k.push(e);
        }
        k.finish()
    }

    #[test]
    fn sglang_cumulative_and_incremental_lists_give_the_same_ids() {
        let cumulative = keep(
            Dialect::Sglang,
            &[
                r#"{"text":"a","output_ids":[7,7],"meta_info":{"completion_tokens":2}}"#,
                r#"{"text":"ab","output_ids":[7,7,7],"meta_info":{"completion_tokens":3}}"#,
                r#"{"text":"abc","output_ids":[7,7,7,9,7],"meta_info":{"completion_tokens":5,"finish_reason":{"type":"length"}}}"#,
                "[DONE]",
            ],
        );
        let incremental = keep(
            Dialect::Sglang,
            &[
                r#"{"text":"a","output_ids":[7,7],"meta_info":{"completion_tokens":2}}"#,
                r#"{"text":"b","output_ids":[7],"meta_info":{"completion_tokens":3}}"#,
                r#"{"text":"c","output_ids":[9,7],"meta_info":{"completion_tokens":5}}"#,
                "[DONE]",
            ],
        );
        assert_eq!(cumulative, Some(vec![7, 7, 7, 9, 7]));
        assert_eq!(incremental, cumulative);
        // Without a count: a list extending the ids so far is cumulative.
        let uncounted = keep(
            Dialect::Sglang,
            &[r#"{"output_ids":[4,5]}"#, r#"{"output_ids":[4,5,6]}"#],
        );
        assert_eq!(uncounted, Some(vec![4, 5, 6]));
    }

    #[test]
    fn vllm_token_ids_are_concatenated_and_other_streams_list_none() {
        let vllm = keep(
            Dialect::OpenAi,
            &[
                r#"{"choices":[{"index":0,"text":"","token_ids":[1950,1186],"prompt_token_ids":[5,6]}]}"#,
                r#"{"choices":[{"index":0,"text":"","token_ids":[1950],"finish_reason":"length"}]}"#,
                r#"{"choices":[],"usage":{"completion_tokens":3}}"#,
                "[DONE]",
            ],
        );
        assert_eq!(vllm, Some(vec![1950, 1186, 1950]));
        let llamacpp = keep(
            Dialect::OpenAi,
            &[
                r#"{"choices":[{"text":" uib","index":0,"logprobs":null,"finish_reason":null}]}"#,
                "[DONE]",
            ],
        );
        assert_eq!(llamacpp, None);
        assert_eq!(
            keep(Dialect::Sglang, &["{not json", r#"{"error":"x"}"#]),
            None
        );
        assert_eq!(
            keep(Dialect::Sglang, &[r#"{"output_ids":["a"]}"#]),
            None,
            "ids of another type are not ids"
        );
    }

    #[test]
    fn recorded_real_streams_give_their_ids() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/streams/real");
        for (file, dialect, want_len) in [
            ("sglang_native_cumulative.json", Dialect::Sglang, None),
            ("sglang_native_incremental.json", Dialect::Sglang, None),
            ("vllm_token_ids.json", Dialect::OpenAi, Some(16)),
            ("llamacpp_token_ids.json", Dialect::OpenAi, Some(0)),
        ] {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
            let mut sse = super::super::sse::SseDecoder::new();
            let mut k = OutputIdsKeeper::new(dialect);
            for r in v["reads"].as_array().unwrap() {
                for e in sse.push(r["data"].as_str().unwrap().as_bytes()) {
                    k.push(&e.data);
                }
            }
            let ids = k.finish();
            match want_len {
                Some(0) => assert_eq!(ids, None, "{file}"),
                Some(n) => assert_eq!(ids.map(|v| v.len()), Some(n), "{file}"),
                None => {
                    let max = v["request"]["body"]["sampling_params"]["max_new_tokens"]
                        .as_u64()
                        .unwrap();
                    assert_eq!(ids.map(|v| v.len() as u64), Some(max), "{file}");
                }
            }
        }
    }
}
