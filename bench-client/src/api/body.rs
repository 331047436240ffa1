//! A request body as bytes: what [`Dialect::build_body`] gives, serialised, without building a
//! `Value` per prompt token. A token-id prompt is the body's largest part (a 185k-token prompt is
//! ~1.3 MB of JSON) and is written straight from its ids.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::{openai, sglang, Dialect};
use crate::plan::prompt::Prompt;
use crate::plan::RequestSpec;

/// A JSON object and one more array of ids under `key`, serialised as the object with the key
/// inserted would be: a `serde_json::Map` keeps its keys sorted, so the ids go where the key sorts.
struct WithIds<'a> {
    rest: &'a Map<String, Value>,
    key: &'static str,
    ids: &'a [u32],
}

impl Serialize for WithIds<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.rest.len() + 1))?;
        let mut pending = true;
        for (k, v) in self.rest {
            if pending && k.as_str() > self.key {
                map.serialize_entry(self.key, self.ids)?;
                pending = false;
            }
            if k != self.key {
                map.serialize_entry(k, v)?;
            }
        }
        if pending {
            map.serialize_entry(self.key, self.ids)?;
        }
        map.end()
    }
}

impl Dialect {
    /// The JSON body of one streaming request, serialised: the bytes of
    /// `serde_json::to_vec(&self.build_body(spec, model)?)`.
    pub fn body_bytes(&self, spec: &RequestSpec, model: Option<&str>) -> Result<Vec<u8>, String> {
        let rest = match (self, &spec.prompt) {
            (Self::Sglang, Prompt::TokenIds(ids)) => Some(("input_ids", sglang::fields(spec), ids)),
            (Self::OpenAi, Prompt::TokenIds(ids)) => {
                Some(("prompt", openai::common_fields(spec, model), ids))
            }
            _ => None,
        };
        let bytes = match rest {
            Some((key, Value::Object(rest), ids)) => serde_json::to_vec(&WithIds {
                rest: &rest,
                key,
                ids,
            }),
            _ => serde_json::to_vec(&self.build_body(spec, model)?),
        };
        bytes.map_err(|e| format!("cannot serialise request body: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_are_those_of_the_built_body() {
        let ids = Prompt::TokenIds(vec![0, 7, 31_999, u32::MAX]);
        let mut specs = vec![
            RequestSpec::new("r\"1", ids.clone(), 17),
            RequestSpec::new("r2", Prompt::TokenIds(Vec::new()), 1),
            RequestSpec::new("r3", Prompt::Text("a \"b\"\n".into()), 5),
        ];
        let mut s = RequestSpec::new("r4", ids, 3);
        s.ignore_eos = false;
        s.return_token_ids = true;
        specs.push(s);
        for d in [Dialect::Sglang, Dialect::OpenAi, Dialect::OpenAiChat] {
            for spec in &specs {
                for model in [None, Some("m"), Some("zz")] {
                    let want = d
                        .build_body(spec, model)
                        .map(|b| serde_json::to_vec(&b).unwrap());
                    assert_eq!(d.body_bytes(spec, model), want, "{d:?} {}", spec.rid);
                }
            }
        }
    }
}
