//! OpenAI `/v1/chat/completions`: a text prompt as one user message; events decode like completions
//! but from `choices[0].delta`, with a role-only first chunk that carries no tokens.

use serde_json::{json, Value};

use super::openai::common_fields;
use crate::plan::prompt::Prompt;
use crate::plan::RequestSpec;

/// Build the `/v1/chat/completions` body; token-id prompts cannot be sent as chat messages.
pub fn build_body(spec: &RequestSpec, model: Option<&str>) -> Result<Value, String> {
    let text = match &spec.prompt {
        Prompt::Text(t) => t,
        Prompt::TokenIds(_) => {
            return Err("the openai-chat dialect takes text prompts only; use --api openai or sglang for token-id prompts".into())
        }
    };
    let mut body = common_fields(spec, model);
    body["messages"] = json!([{ "role": "user", "content": text }]);
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_rejected_with_a_reason() {
        let spec = RequestSpec::new("r", Prompt::TokenIds(vec![1]), 1);
        assert!(build_body(&spec, None)
            .unwrap_err()
            .contains("text prompts"));
    }

    #[test]
    fn text_goes_into_one_user_message() {
        let spec = RequestSpec::new("r", Prompt::Text("hello".into()), 2);
        let b = build_body(&spec, Some("m")).unwrap();
        assert_eq!(b["messages"][0]["content"], "hello");
        assert_eq!(b["max_tokens"], 2);
    }
}
