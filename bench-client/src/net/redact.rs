//! Secrets never leave the process: server answers and URLs are redacted before they are stored in
//! a manifest, a report or a record, or printed.
//!
//! Rules: in JSON, the value of every key whose name ends with the word `key`, `password`, `secret`,
//! `token` or the like ([`secret_name`]; any case, any depth) becomes [`REDACTED`] when it holds a non-empty string anywhere
//! (numbers, booleans and nulls are counts and switches, kept: `max_total_tokens`), and so does
//! any string equal to the client's own API key, the value of a header given as a `[name, value]`
//! pair or a `name: value` string under a secret's name (AIPerf's `headers`, `extra`); in text,
//! the `user:password@` of a URL becomes `<redacted>@` and the credential after `Bearer ` or
//! `Basic ` becomes `<redacted>`.

use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// The words that name a secret when a key ends with one.
const SECRET_WORDS: [&str; 9] = [
    "key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "token",
    "credential",
    "credentials",
    "authorization",
];

/// Whether a JSON key (or a dotted path of keys) names a secret: its last key's last word (split at
/// `_`, `-`, spaces and camelCase humps) is one of `SECRET_WORDS`: `api_key`, `adminApiKey`,
/// `ssl_keyfile_password`, `HF_TOKEN`, `client_secret`; not `tokenizer_path`, `token_attribution`,
/// `max_total_tokens` or `ssl_keyfile` (a path).
pub fn secret_name(k: &str) -> bool {
    let last = k.rsplit('.').next().unwrap_or(k);
    let mut word = String::new();
    let mut prev_lower = false;
    for c in last.chars() {
        if !c.is_alphanumeric() {
            word.clear();
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            word.clear();
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    SECRET_WORDS.contains(&word.as_str())
}

/// Whether a value holds a non-empty string, at any depth.
fn holds_text(v: &Value) -> bool {
    match v {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => a.iter().any(holds_text),
        Value::Object(m) => m.values().any(holds_text),
        _ => false,
    }
}

/// `v` with every secret replaced by [`REDACTED`] (see the module's rules); `api_key`: the
/// client's own key, hidden wherever it appears as a whole string value.
pub fn redact_json(v: &mut Value, api_key: Option<&str>) {
    let api_key = api_key.filter(|k| !k.is_empty());
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if secret_name(k) && holds_text(x) {
                    *x = Value::String(REDACTED.into());
                } else {
                    redact_json(x, api_key);
                }
            }
        }
        Value::Array(a) => {
            let pair_named_secret =
                a.len() == 2 && a[0].as_str().is_some_and(secret_name) && holds_text(&a[1]);
            if pair_named_secret {
                a[1] = Value::String(REDACTED.into());
            } else {
                a.iter_mut().for_each(|x| redact_json(x, api_key));
            }
        }
        Value::String(s) => {
            if api_key.is_some_and(|k| s == k) {
                *s = REDACTED.into();
            } else if let Some(name) = header_named_secret(s) {
                *s = format!("{name}: {REDACTED}");
            } else {
                *s = redact_keyed(s, api_key);
            }
        }
        _ => {}
    }
}

/// The name of a `name: value` header line whose name is a secret's (`Authorization: Bearer x`,
/// `X-Api-Key:abc`), with a non-empty value.
fn header_named_secret(s: &str) -> Option<&str> {
    let (name, value) = s.split_once(':')?;
    let name = name.trim();
    let is_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    (is_name && secret_name(name) && !value.trim().is_empty()).then_some(name)
}

/// A value shown as text under `key` (a dotted path), redacted by the same rules: a secret-named
/// key's value unless it is a number, a boolean, null or `-` (absent); else URL credentials.
pub fn redact_shown(key: &str, value: &str) -> String {
    let plain = value == "-"
        || value
            .split(" | ")
            .all(|v| matches!(v, "true" | "false" | "null") || v.parse::<f64>().is_ok());
    if secret_name(key) && !plain {
        REDACTED.into()
    } else {
        redact_text(value)
    }
}

/// `s` with the `user:password@` (or `user@`) of every URL in it replaced by `<redacted>@`, the
/// value of every query parameter under a secret's name (`?api_key=...`) by `<redacted>`, and
/// the credential after every `Bearer ` (any case) or `Basic ` (a base64 word) by `<redacted>`.
pub fn redact_text(s: &str) -> String {
    redact_schemes(&redact_urls(s))
}

/// The shortest API key hidden where it appears inside a text (a server's error that quotes it):
/// a shorter one would hide common words.
const KEY_IN_TEXT_MIN: usize = 8;

/// [`redact_text`], and the client's own `api_key` wherever it appears in `s` (at least
/// 8 characters long: a server's answer may quote it).
pub fn redact_keyed(s: &str, api_key: Option<&str>) -> String {
    match api_key {
        Some(k) if k.len() >= KEY_IN_TEXT_MIN && s.contains(k) => {
            redact_text(&s.replace(k, REDACTED))
        }
        _ => redact_text(s),
    }
}

/// The credential after an HTTP authorization scheme's name: up to the next whitespace, quote or
/// comma.
fn redact_schemes(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    let mut from = 0;
    while let Some((start, len)) = [("bearer ", lower.as_str()), ("Basic ", s)]
        .iter()
        .filter_map(|(w, hay)| hay[from..].find(w).map(|p| (from + p, w.len())))
        .min()
    {
        let cred = start + len;
        let end = s[cred..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ','))
            .map_or(s.len(), |e| cred + e);
        let word = &s[cred..end];
        // `Basic` is a common word: its credential is base64 (`user:password`).
        let basic = len == "Basic ".len();
        let base64 = word.len() >= 4
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='));
        if !word.is_empty() && (!basic || base64) {
            out.push_str(&s[at..cred]);
            out.push_str(REDACTED);
            at = end;
        }
        from = end.max(cred);
    }
    out.push_str(&s[at..]);
    out
}

/// `s` with the `user:password@` (or `user@`) of every URL in it replaced by `<redacted>@`.
fn redact_urls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find("://") {
        let (head, tail) = rest.split_at(p + 3);
        out.push_str(head);
        // The authority ends at the first `/`, `?`, `#` or whitespace.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        // The rest of the URL: its path, query and fragment, to whitespace or a quote.
        let tail = &tail[end..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\''))
            .unwrap_or(tail.len());
        out.push_str(&redact_query(&tail[..end]));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// A URL's path, query and fragment with the value of every query parameter under a secret's
/// name replaced by [`REDACTED`].
fn redact_query(s: &str) -> String {
    let Some(q) = s.find('?') else {
        return s.to_string();
    };
    let (path, query) = s.split_at(q + 1);
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((name, v)) if secret_name(name) && !v.is_empty() => format!("{name}={REDACTED}"),
            _ => p.to_string(),
        })
        .collect();
    format!("{path}{}{fragment}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_at_any_depth_are_replaced() {
        let mut v = json!({
            "api_key": "sk-1", "Admin_API_Key": "a", "ssl_keyfile_password": "p",
            "nested": [{"HF_TOKEN": "t", "client_secret": "s", "note": "sk-own"}],
            "max_total_tokens": 4096, "chunked_prefill_size": 512, "ssl_keyfile": null,
            "tokenizer_path": "/m", "model_path": "/m"
        });
        redact_json(&mut v, Some("sk-own"));
        assert_eq!(v["api_key"], REDACTED);
        assert_eq!(v["Admin_API_Key"], REDACTED);
        assert_eq!(v["ssl_keyfile_password"], REDACTED);
        assert_eq!(v["nested"][0]["HF_TOKEN"], REDACTED);
        assert_eq!(v["nested"][0]["client_secret"], REDACTED);
        assert_eq!(v["nested"][0]["note"], REDACTED);
        assert_eq!(v["max_total_tokens"], 4096);
        assert_eq!(v["ssl_keyfile"], Value::Null);
        assert_eq!(v["model_path"], "/m");
        // Names that only contain a secret's word are not secrets.
        assert_eq!(v["tokenizer_path"], "/m");
    }

    #[test]
    fn headers_as_pairs_or_lines_under_a_secret_name_are_replaced() {
        let mut v = json!({
            "headers": [["Authorization", "Bearer sk-1"], ["X-Api-Key", "k"], ["Accept", "text/plain"]],
            "extra": [["api_token", "t"], ["max_tokens", 64]],
            "header": ["Authorization: Bearer sk-2", "x-api-key:k2", "Accept: */*"]
        });
        redact_json(&mut v, None);
        assert_eq!(v["headers"][0][1], REDACTED);
        assert_eq!(v["headers"][1][1], REDACTED);
        assert_eq!(v["headers"][2][1], "text/plain");
        assert_eq!(v["extra"][0][1], REDACTED);
        assert_eq!(v["extra"][1][1], 64);
        assert_eq!(v["header"][0], "Authorization: <redacted>");
        assert_eq!(v["header"][1], "x-api-key: <redacted>");
        assert_eq!(v["header"][2], "Accept: */*");
    }

    #[test]
    fn a_secret_is_named_by_the_last_word_of_its_key() {
        for k in [
            "api_key",
            "admin_api_key",
            "Admin_API_Key",
            "ssl_keyfile_password",
            "HF_TOKEN",
            "client_secret",
            "apiKey",
            "x-api-key",
            "server_info.api_key",
            "authorization",
        ] {
            assert!(secret_name(k), "{k}");
        }
        for k in [
            "tokenizer_path",
            "token_attribution",
            "imported.token_attribution",
            "max_total_tokens",
            "ssl_keyfile",
            "keyboard",
            "model_path",
            "skip_tokenizer_init",
        ] {
            assert!(!secret_name(k), "{k}");
        }
    }

    #[test]
    fn shown_values_under_secret_keys_are_replaced_unless_numbers() {
        assert_eq!(redact_shown("server_info.api_key", "sk-1 | -"), REDACTED);
        assert_eq!(
            redact_shown("server_info.max_total_tokens", "4096 | 8192"),
            "4096 | 8192"
        );
        assert_eq!(redact_shown("server_info.api_key", "-"), "-");
        assert_eq!(redact_shown("url", "http://u:p@h"), "http://<redacted>@h");
    }

    #[test]
    fn the_clients_key_is_hidden_inside_a_text_and_a_secret_query_parameter_too() {
        let mut v = json!({"x": "your key is SEKRETKEY123.", "n": "SEKRETKEY123"});
        redact_json(&mut v, Some("SEKRETKEY123"));
        assert_eq!(v["x"], "your key is <redacted>.");
        assert_eq!(v["n"], REDACTED);
        assert_eq!(
            redact_keyed(
                "Incorrect API key provided: SEKRETKEY123",
                Some("SEKRETKEY123")
            ),
            "Incorrect API key provided: <redacted>"
        );
        // A short key would hide words: only a whole value equal to it is.
        assert_eq!(redact_keyed("a key k", Some("k")), "a key k");
        assert_eq!(
            redact_text("GET http://h:1/v1?api_key=s3cr3t&model=m#top done"),
            "GET http://h:1/v1?api_key=<redacted>&model=m#top done"
        );
        assert_eq!(
            redact_text("http://h/?max_tokens=5"),
            "http://h/?max_tokens=5"
        );
    }

    #[test]
    fn url_credentials_are_replaced() {
        assert_eq!(
            redact_text("http://u:pw@h:1/x and https://h2/ and ftp://only@h"),
            "http://<redacted>@h:1/x and https://h2/ and ftp://<redacted>@h"
        );
        assert_eq!(redact_text("no url"), "no url");
        assert_eq!(
            redact_text("401 for header Authorization: Bearer sk-abc, Basic dTpw"),
            "401 for header Authorization: Bearer <redacted>, Basic <redacted>"
        );
        assert_eq!(
            redact_text("the basic plan, Basic auth."),
            "the basic plan, Basic auth."
        );
    }
}
