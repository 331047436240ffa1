//! Wire dialects: request bodies and per-event decoding into [`Chunk`]s. Dialect differences live here only.

mod body;
mod chunk;
mod event;
pub mod openai;
pub mod openai_chat;
pub mod output_ids;
#[cfg(test)]
mod reference;
pub mod sglang;
pub mod sse;

use serde_json::Value;

use crate::plan::RequestSpec;
pub use chunk::{Chunk, Dialect, ServerTiming, TokenAttribution, Usage};

impl Dialect {
    /// Request path.
    pub fn path(&self) -> &'static str {
        match self {
            Self::Sglang => "/generate",
            Self::OpenAi => "/v1/completions",
            Self::OpenAiChat => "/v1/chat/completions",
        }
    }

    /// Build the JSON body for one streaming request.
    pub fn build_body(&self, spec: &RequestSpec, model: Option<&str>) -> Result<Value, String> {
        match self {
            Self::Sglang => Ok(sglang::build_body(spec)),
            Self::OpenAi => Ok(openai::build_body(spec, model)),
            Self::OpenAiChat => openai_chat::build_body(spec, model),
        }
    }

    /// A fresh per-stream event decoder.
    pub fn decoder(&self) -> StreamDecoder {
        StreamDecoder {
            dialect: *self,
            state: DecoderState::default(),
        }
    }
}

/// Result of decoding one event's data.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    /// A content, usage, role or error event.
    Chunk(Chunk),
    /// `[DONE]`.
    Done,
}

/// Per-stream decoding state shared by the dialects (cumulative counters).
#[derive(Clone, Debug, Default)]
pub(crate) struct DecoderState {
    pub prev_completion_tokens: u32,
    /// Length of the last `output_ids` list seen (`None`: none yet).
    pub prev_output_ids_len: Option<usize>,
    /// The elements of that list, kept only while `output_ids_cumulative` is still unknown.
    pub prev_output_ids: Vec<Value>,
    /// `Some(true)`: `output_ids` are cumulative; `Some(false)`: incremental; `None`: not yet known.
    pub output_ids_cumulative: Option<bool>,
    pub prev_text_len: usize,
    /// The last `text`, in a buffer reused from event to event.
    pub prev_text: String,
    /// Attribution of each content event (`None`: count unknown).
    pub methods: Vec<Option<TokenAttribution>>,
}

/// Decodes the `data:` payloads of one stream, in order.
#[derive(Clone, Debug)]
pub struct StreamDecoder {
    dialect: Dialect,
    state: DecoderState,
}

impl StreamDecoder {
    /// Decode one event's data arriving at `at_ns`.
    pub fn decode(&mut self, data: &str, at_ns: u64) -> Decoded {
        let data = data.trim();
        if data == "[DONE]" {
            return Decoded::Done;
        }
        // The elements of `output_ids` are kept only for the comparison that decides whether the
        // lists are cumulative, and only from an event whose token count comes from them (an SGLang
        // event without `completion_tokens`). Such an event is parsed a second time; every other
        // event is parsed once, its ids counted, not collected.
        let parsed = event::parse(data, false).and_then(|ev| {
            let counts_from_ids = self.dialect == Dialect::Sglang
                && self.state.output_ids_cumulative.is_none()
                && ev.output_ids.is_some()
                && ev
                    .meta_info
                    .as_ref()
                    .and_then(|m| m.completion_tokens)
                    .is_none();
            if counts_from_ids {
                event::parse(data, true)
            } else {
                Ok(ev)
            }
        });
        let event = match parsed {
            Ok(ev) => ev,
            Err(e) => {
                return Decoded::Chunk(Chunk {
                    at_ns,
                    error: Some(format!("undecodable event ({e}): {}", truncate(data, 200)).into()),
                    ..Chunk::default()
                })
            }
        };
        if let Some(msg) = error_message(&event) {
            return Decoded::Chunk(Chunk {
                at_ns,
                error: Some(msg.into()),
                ..Chunk::default()
            });
        }
        let chunk = match self.dialect {
            Dialect::Sglang => sglang::decode(event, at_ns, &mut self.state),
            Dialect::OpenAi => openai::decode(&event, at_ns, &mut self.state, false),
            Dialect::OpenAiChat => openai::decode(&event, at_ns, &mut self.state, true),
        };
        Decoded::Chunk(chunk)
    }

    /// How per-chunk counts were known over the whole stream so far: one method if every content event
    /// had a count from it, otherwise `Unknown`.
    pub fn attribution(&self) -> TokenAttribution {
        let mut method = None;
        for m in &self.state.methods {
            match (m, method) {
                (None, _) => return TokenAttribution::Unknown,
                (Some(m), None) => method = Some(*m),
                (Some(m), Some(prev)) if *m != prev => {
                    // Mixed sources (for example token_ids on some chunks only): counts still known.
                    method = Some(prev.min(*m));
                }
                _ => {}
            }
        }
        method.unwrap_or(TokenAttribution::Unknown)
    }
}

/// In-band error message of an event: `{"error": {"message": ..}}`, `{"error": ".."}` or
/// `{"object": "error", "message": ..}`.
pub(crate) fn error_message(ev: &event::Event) -> Option<String> {
    if let Some(e) = &ev.error {
        if e.is_null() {
            return None;
        }
        return Some(match e {
            Value::String(s) => s.clone(),
            Value::Object(o) => o
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| e.to_string()),
            other => other.to_string(),
        });
    }
    if ev.object.as_deref() == Some("error") {
        return Some(
            ev.message
                .as_deref()
                .unwrap_or("unspecified error")
                .to_string(),
        );
    }
    None
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::reference::{self, RefState};
    use super::*;
    use proptest::prelude::*;

    /// A decoded event with its token count left out: the reference parses, it does not attribute.
    fn parsed(d: Decoded) -> Decoded {
        match d {
            Decoded::Chunk(c) => Decoded::Chunk(Chunk { tokens: None, ..c }),
            other => other,
        }
    }

    /// Decode `events` with the typed decoder and with the reference `Value` decoder; both must give
    /// the same chunks (token counts aside) and the same end.
    fn same_as_reference(dialect: Dialect, events: &[String]) -> Result<(), String> {
        let mut typed = dialect.decoder();
        let mut st = RefState::default();
        for (i, e) in events.iter().enumerate() {
            let got = parsed(typed.decode(e, i as u64));
            let want = match reference::decode(dialect, e, i as u64, &mut st) {
                Some(c) => Decoded::Chunk(c),
                None => Decoded::Done,
            };
            if got != want {
                return Err(format!(
                    "{} event {i} {e:?}: typed {got:?}, reference {want:?}",
                    dialect.as_str()
                ));
            }
        }
        Ok(())
    }

    /// The events of a fixture transcript and the dialect it was recorded in.
    fn fixture_events(path: &std::path::Path) -> (Option<Dialect>, Vec<String>) {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut sse = crate::api::sse::SseDecoder::new();
        let mut events = vec![];
        for r in v["reads"].as_array().unwrap() {
            let data = r["data"].as_str().unwrap();
            events.extend(sse.push(data.as_bytes()).into_iter().map(|e| e.data));
        }
        let dialect = DIALECTS
            .into_iter()
            .find(|d| v["dialect"].as_str() == Some(d.as_str()));
        (dialect, events)
    }

    fn fixture_files() -> Vec<std::path::PathBuf> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/streams");
        let mut files = vec![];
        for d in [dir.clone(), dir.join("real")] {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for f in rd.flatten() {
                if f.path().extension().is_some_and(|x| x == "json") {
                    files.push(f.path());
                }
            }
        }
        files.sort();
        assert!(files.len() >= 10, "fixtures not found in {}", dir.display());
        files
    }

    /// Token attribution held to what the servers themselves reported: in every recorded or
    /// constructed transcript that ends with the server's own output count and gives every content
    /// chunk a count, the counts add up to the server's.
    #[test]
    fn fixture_streams_attribute_the_tokens_the_server_reported() {
        let mut checked = 0;
        for f in fixture_files() {
            let (Some(dialect), events) = fixture_events(&f) else {
                continue;
            };
            let mut typed = dialect.decoder();
            let (mut sum, mut reported, mut all_counted) = (0u64, None, true);
            for (i, e) in events.iter().enumerate() {
                let Decoded::Chunk(c) = typed.decode(e, i as u64) else {
                    continue;
                };
                if c.error.is_some() {
                    all_counted = false;
                }
                match c.tokens {
                    Some(t) => sum += u64::from(t),
                    None if c.text_len > 0 || c.content_event => all_counted = false,
                    None => {}
                }
                if let Some(n) = c.usage.and_then(|u| u.completion_tokens) {
                    reported = Some(u64::from(n));
                }
            }
            if let (Some(n), true) = (reported, all_counted) {
                assert_eq!(
                    sum,
                    n,
                    "{}: tokens per chunk add to {sum}, the server said {n}",
                    f.display()
                );
                checked += 1;
            }
        }
        assert!(
            checked >= 15,
            "only {checked} transcripts carry the server's count"
        );
    }

    const DIALECTS: [Dialect; 3] = [Dialect::Sglang, Dialect::OpenAi, Dialect::OpenAiChat];

    #[test]
    fn fixture_streams_parse_as_the_reference_parses() {
        for f in fixture_files() {
            let (_, events) = fixture_events(&f);
            for d in DIALECTS {
                same_as_reference(d, &events).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            }
        }
    }

    #[test]
    fn malformed_events_give_the_same_error_chunks() {
        let deep = format!("{{\"text\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        let deep_ignored = format!("{{\"x\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        let cases = [
            "{not json",
            "",
            "   ",
            "{\"text\": \"a\"} trailing",
            "{\"text\": \"a\",}",
            "{\"output_ids\": [1, 2,]}",
            "{\"x\": 1e400}",
            "{\"usage\": {\"prompt_tokens\": -1e999}}",
            "{\"text\": \"\\ud800\"}",
            "{\"zz\": \"\\ud800\"}",
            "{\"zz\": \"\\q\"}",
            "{\"text\": \"tab\there\"}",
            "{\"choices\": [{\"text\": \"a\"}, {]}",
            "nul",
            "[1, 2",
            "\"unterminated",
            "{\"a\" 1}",
            "{1: 2}",
            &deep,
            &deep_ignored,
        ];
        for d in DIALECTS {
            for c in cases {
                same_as_reference(d, &[c.to_string()]).unwrap();
                assert!(matches!(
                    d.decoder().decode(c, 0),
                    Decoded::Chunk(Chunk { error: Some(_), .. })
                ));
            }
        }
    }

    #[test]
    fn odd_but_valid_json_decodes_as_before() {
        let cases = [
            "[1, 2]",
            "5",
            "null",
            "\"[DONE] \"",
            "{\"error\": null, \"object\": \"error\"}",
            "{\"error\": 5}",
            "{\"error\": [1, {\"a\": null}]}",
            "{\"error\": {\"code\": 400}}",
            "{\"error\": {\"message\": 7}}",
            "{\"object\": \"error\"}",
            "{\"object\": \"error\", \"message\": \"m\\u00e9\"}",
            "{\"te\\u0078t\": \"a\\nb\", \"meta_info\": null}",
            "{\"text\": 1, \"meta_info\": 3, \"output_ids\": {}}",
            "{\"text\": \"ab\", \"text\": 7}",
            "{\"meta_info\": {\"completion_tokens\": 99999999999, \"finish_reason\": {\"type\": 1}}}",
            "{\"meta_info\": {\"completion_tokens\": -3, \"prompt_tokens\": 2.0, \"finish_reason\": [\"x\"]}}",
            "{\"choices\": 1, \"usage\": 2}",
            "{\"choices\": [], \"usage\": {\"completion_tokens\": 4, \"cached_tokens\": 1, \"prompt_tokens_details\": null}}",
            "{\"choices\": [7, {\"text\": \"z\"}], \"usage\": null}",
            "{\"choices\": [{\"delta\": {\"role\": null}, \"token_ids\": []}]}",
            "{\"choices\": [{\"delta\": {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"hm\"}}]}",
            "{\"choices\": [{\"delta\": 3, \"text\": \"x\", \"finish_reason\": {\"type\": \"stop\"}}]}",
            "{\"choices\": [{\"text\": \"x\", \"token_ids\": \"no\"}], \"usage\": {\"prompt_tokens_details\": {\"cached_tokens\": 5}, \"cached_tokens\": 6}}",
        ];
        for d in DIALECTS {
            for c in cases {
                same_as_reference(d, &[c.to_string()]).unwrap();
            }
            same_as_reference(d, &cases.map(str::to_string)).unwrap();
        }
    }

    /// A JSON value of any type, nested a little.
    fn any_json() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            (0u64..6).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            (-5i64..0).prop_map(|n| n.to_string()),
            Just("1.5".to_string()),
            Just("2.0".to_string()),
            prop::sample::select(vec![
                "\"\"",
                "\"a\"",
                "\"ab\"",
                "\"abc\"",
                "\"length\"",
                "\"error\"",
                "\"\\u00e9\"",
                "\"assistant\"",
            ])
            .prop_map(str::to_string),
        ];
        leaf.prop_recursive(2, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(inner, 0..3).prop_map(|v| {
                    let kv: Vec<String> = v.iter().map(|x| format!("\"k\":{x}")).collect();
                    format!("{{{}}}", kv.join(","))
                }),
            ]
        })
    }

    /// An object with some of `keys` (repeats possible), each value either from `shaped(key)` or
    /// of any type.
    fn object(
        keys: Vec<&'static str>,
        shaped: impl Fn(&'static str) -> BoxedStrategy<String>,
    ) -> BoxedStrategy<String> {
        let fields: Vec<BoxedStrategy<String>> = keys
            .iter()
            .map(|&k| {
                prop_oneof![3 => shaped(k), 1 => any_json()]
                    .prop_map(move |v| format!("\"{k}\":{v}"))
                    .boxed()
            })
            .collect();
        prop::collection::vec(prop::strategy::Union::new(fields), 0..6)
            .prop_map(|f| format!("{{{}}}", f.join(",")))
            .boxed()
    }

    fn small_count() -> BoxedStrategy<String> {
        prop_oneof![
            (0u32..8).prop_map(|n| n.to_string()),
            Just("4294967296".to_string())
        ]
        .boxed()
    }

    fn string() -> BoxedStrategy<String> {
        prop::sample::select(vec![
            "\"\"",
            "\"a\"",
            "\"ab\"",
            "\"stop\"",
            "\"error\"",
            "\"x\\ny\"",
        ])
        .prop_map(str::to_string)
        .boxed()
    }

    fn id_list() -> BoxedStrategy<String> {
        prop::collection::vec(0u32..3, 0..4)
            .prop_map(|v| format!("{v:?}"))
            .boxed()
    }

    fn shaped(k: &'static str) -> BoxedStrategy<String> {
        match k {
            "meta_info" => object(
                vec![
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "finish_reason",
                    "id",
                ],
                shaped,
            ),
            "finish_reason" => {
                prop_oneof![string(), object(vec!["type", "length"], shaped)].boxed()
            }
            "choices" => prop::collection::vec(
                object(
                    vec!["text", "delta", "finish_reason", "token_ids", "index"],
                    shaped,
                ),
                0..3,
            )
            .prop_map(|v| format!("[{}]", v.join(",")))
            .boxed(),
            "delta" => object(vec!["content", "reasoning_content", "role"], shaped),
            "usage" => object(
                vec![
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "prompt_tokens_details",
                ],
                shaped,
            ),
            "prompt_tokens_details" => object(vec!["cached_tokens"], shaped),
            "error" => prop_oneof![string(), object(vec!["message", "code"], shaped)].boxed(),
            "output_ids" | "token_ids" => id_list(),
            "prompt_tokens" | "completion_tokens" | "cached_tokens" | "length" | "index" => {
                small_count()
            }
            _ => string(),
        }
    }

    /// Events built from the keys the dialects read, with values of every JSON type, repeated keys
    /// and cut-off text.
    fn event() -> impl Strategy<Value = String> {
        let top = vec![
            "error",
            "object",
            "message",
            "text",
            "output_ids",
            "meta_info",
            "choices",
            "usage",
            "id",
        ];
        (object(top, shaped), prop::bool::weighted(0.15), 0usize..64).prop_map(|(v, cut, at)| {
            if cut && v.len() > 1 {
                v[..at % v.len()].to_string()
            } else {
                v
            }
        })
    }

    /// A plausible SGLang event: small id lists, so that cumulative and incremental lists both occur.
    fn sglang_event() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(0u32..3, 0..5),
            prop::option::of(0u32..6),
            prop::sample::select(vec!["", "a", "ab", "abc", "b"]),
        )
            .prop_map(|(ids, cum, text)| {
                let meta = cum.map_or(String::new(), |c| {
                    format!(",\"meta_info\":{{\"completion_tokens\":{c}}}")
                });
                format!("{{\"text\":\"{text}\",\"output_ids\":{ids:?}{meta}}}")
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn random_events_decode_as_before(events in prop::collection::vec(event(), 1..8)) {
            for d in DIALECTS {
                prop_assert!(same_as_reference(d, &events).is_ok(), "{:?}", same_as_reference(d, &events));
            }
        }

        #[test]
        fn random_sglang_streams_decode_as_before(events in prop::collection::vec(sglang_event(), 1..8)) {
            prop_assert!(same_as_reference(Dialect::Sglang, &events).is_ok(), "{:?}", same_as_reference(Dialect::Sglang, &events));
        }
    }
}
