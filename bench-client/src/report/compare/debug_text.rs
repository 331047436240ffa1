//! Rust's debug text of a run's settings read back as JSON: how manifests of earlier versions
//! recorded a load run's `schedule` and `workload` (`Closed { concurrency: 64 }`), before they
//! were typed (`crate::results::settings`).

use serde_json::Value;

/// Rust's debug text of a value as JSON: `Name { a: 1, b: x }` is `{"Name": {"a": 1, "b": "x"}}`,
/// `Name(x)` is `{"Name": x}`, `Some(x)` is `x`, `None` is null, a bare name a string. Text cut
/// short (the manifest keeps 400 characters) gives what was read before the cut.
pub(super) fn debug_value(s: &str) -> Value {
    let mut p = DebugText {
        s: s.as_bytes(),
        i: 0,
    };
    p.value()
}

struct DebugText<'a> {
    s: &'a [u8],
    i: usize,
}

impl DebugText<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        let hit = self.s.get(self.i) == Some(&c);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn word(&mut self, ok: impl Fn(u8) -> bool) -> String {
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&c| ok(c)) {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn value(&mut self) -> Value {
        self.ws();
        match self.s.get(self.i) {
            None => Value::Null,
            Some(b'"') => {
                self.i += 1;
                let mut out = Vec::new();
                while let Some(&c) = self.s.get(self.i) {
                    self.i += 1;
                    match c {
                        b'"' => break,
                        b'\\' => {
                            if let Some(&e) = self.s.get(self.i) {
                                out.push(e);
                                self.i += 1;
                            }
                        }
                        c => out.push(c),
                    }
                }
                Value::String(String::from_utf8_lossy(&out).into_owned())
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                while self.i < self.s.len() && !self.eat(b']') {
                    items.push(self.value());
                    if !self.eat(b',') {
                        self.eat(b']');
                        break;
                    }
                }
                Value::Array(items)
            }
            Some(c) if c.is_ascii_digit() || *c == b'-' => {
                let w = self.word(|c| c.is_ascii_alphanumeric() || b"-+._".contains(&c));
                w.parse::<u64>()
                    .map(Value::from)
                    .or_else(|_| w.parse::<f64>().map(Value::from))
                    .unwrap_or(Value::String(w))
            }
            Some(_) => {
                let name = self.word(|c| c.is_ascii_alphanumeric() || c == b'_');
                if name.is_empty() {
                    // Not debug text: stop here.
                    self.i = self.s.len();
                    return Value::Null;
                }
                if self.eat(b'{') {
                    let mut fields = serde_json::Map::new();
                    loop {
                        self.ws();
                        if self.i >= self.s.len() || self.eat(b'}') {
                            break;
                        }
                        if self.s[self.i..].starts_with(b"..") {
                            self.i += 2;
                            continue;
                        }
                        let key = self.word(|c| c.is_ascii_alphanumeric() || c == b'_');
                        if key.is_empty() || !self.eat(b':') {
                            self.i = self.s.len();
                            break;
                        }
                        let v = self.value();
                        fields.insert(key, v);
                        self.eat(b',');
                    }
                    let mut m = serde_json::Map::new();
                    m.insert(name, Value::Object(fields));
                    Value::Object(m)
                } else if self.eat(b'(') {
                    let mut items = Vec::new();
                    while self.i < self.s.len() && !self.eat(b')') {
                        items.push(self.value());
                        if !self.eat(b',') {
                            self.eat(b')');
                            break;
                        }
                    }
                    let inner = if items.len() == 1 {
                        items.pop().unwrap_or(Value::Null)
                    } else {
                        Value::Array(items)
                    };
                    if name == "Some" {
                        return inner;
                    }
                    let mut m = serde_json::Map::new();
                    m.insert(name, inner);
                    Value::Object(m)
                } else {
                    match name.as_str() {
                        "None" => Value::Null,
                        "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        _ => Value::String(name),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_text_is_read_back() {
        assert_eq!(
            debug_value("Open { rate: 20.0, kind: Poisson, burstiness: 1.0 }"),
            serde_json::json!({"Open": {"rate": 20.0, "kind": "Poisson", "burstiness": 1.0}})
        );
        let t = debug_value(
            "Trace(Trace { format: Mooncake, requests: 12, limit: Some(5), scale: 0.5, source: \"a \\\"b\\\".jsonl\", .. })",
        );
        assert_eq!(t.pointer("/Trace/Trace/limit"), Some(&serde_json::json!(5)));
        assert_eq!(
            t.pointer("/Trace/Trace/source"),
            Some(&serde_json::json!("a \"b\".jsonl"))
        );
        // Cut short: what came before the cut.
        let cut = debug_value("SharedPrefix { groups: 4, prefix_len: 512, input: Fixed { n: 2");
        assert_eq!(
            cut.pointer("/SharedPrefix/prefix_len"),
            Some(&serde_json::json!(512))
        );
        assert_eq!(debug_value("[1, 2]"), serde_json::json!([1, 2]));
    }
}
