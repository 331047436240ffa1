//! Reading another tool's JSON with errors that name the file, the line and the field: Python's
//! `json` writes `NaN` and `Infinity`, which are made strings first, and every field is read through
//! [`Obj`], which says where it looked.

use serde_json::Value;

use super::ImportError;

/// Python's non-standard number literals (`NaN`, `Infinity`, `-Infinity`) outside strings become the
/// strings `"NaN"`, `"Infinity"` and `"-Infinity"`, so that serde_json reads the rest; a field that
/// must be a number then says so.
pub fn standard(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_str = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let lit = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|l| rest.starts_with(l));
        if let Some(l) = lit {
            out.push('"');
            out.push_str(l);
            out.push('"');
            rest = &rest[l.len()..];
            continue;
        }
        if c == '"' {
            in_str = true;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

/// Parse one JSON document (a whole file, or one line of a JSONL file).
pub fn parse(file: &str, line: Option<usize>, text: &str) -> Result<Value, ImportError> {
    serde_json::from_str(&standard(text)).map_err(|e| {
        let at = match line {
            Some(l) => format!("line {l}, column {}", e.column()),
            None => format!("line {}, column {}", e.line(), e.column()),
        };
        let what = if e.is_eof() {
            "the JSON ends early (a truncated file?)".to_string()
        } else {
            format!("not valid JSON ({e})")
        };
        ImportError::new(file, format!("{at}: {what}"))
    })
}

/// A JSON object and where it came from, for errors that name the field.
#[derive(Clone, Debug)]
pub struct Obj<'a> {
    /// The file.
    pub file: &'a str,
    /// The line of a JSONL file.
    pub line: Option<usize>,
    /// The object's own path (`benchmarks[0].requests`), empty at the top.
    pub path: String,
    /// The value.
    pub v: &'a Value,
}

impl<'a> Obj<'a> {
    /// The top of a document.
    pub fn top(file: &'a str, line: Option<usize>, v: &'a Value) -> Self {
        Self {
            file,
            line,
            path: String::new(),
            v,
        }
    }

    /// The dotted name of `key` in this object.
    pub fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// An error about the field `key`.
    pub fn err(&self, key: &str, msg: impl std::fmt::Display) -> ImportError {
        let at = self.line.map(|l| format!("line {l}: ")).unwrap_or_default();
        ImportError::new(self.file, format!("{at}field {}: {msg}", self.name(key)))
    }

    /// The field, when present and not null.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.v.get(key).filter(|v| !v.is_null())
    }

    /// A required field.
    pub fn req(&self, key: &str) -> Result<&'a Value, ImportError> {
        self.get(key).ok_or_else(|| self.err(key, "missing"))
    }

    /// An optional finite number.
    pub fn num(&self, key: &str) -> Result<Option<f64>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => number(v)
                .map(Some)
                .ok_or_else(|| self.err(key, format!("expected a finite number, found {v}"))),
        }
    }

    /// An optional summary figure: absent where the tool wrote none (or null), or a NaN or
    /// infinity (bench_serving's mean of no values, Python's `NaN`): the requests still import.
    pub fn figure(&self, key: &str) -> Result<Option<f64>, ImportError> {
        match self.get(key) {
            Some(Value::String(t)) if matches!(t.as_str(), "NaN" | "Infinity" | "-Infinity") => {
                Ok(None)
            }
            _ => self.num(key),
        }
    }

    /// An optional time in seconds, a Unix instant or a duration: at least 0 and at most
    /// [`LATEST_S`].
    pub fn secs(&self, key: &str) -> Result<Option<f64>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => seconds(v)
                .map(Some)
                .ok_or_else(|| self.err(key, format!("expected seconds (0 to 1e10), found {v}"))),
        }
    }

    /// An optional string.
    pub fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    /// A required array.
    pub fn arr(&self, key: &str) -> Result<&'a Vec<Value>, ImportError> {
        self.req(key)?
            .as_array()
            .ok_or_else(|| self.err(key, "expected an array"))
    }

    /// A nested object (required).
    pub fn obj(&self, key: &str) -> Result<Obj<'a>, ImportError> {
        let v = self.req(key)?;
        if !v.is_object() {
            return Err(self.err(key, "expected an object"));
        }
        Ok(self.child(self.name(key), v))
    }

    /// The `i`th object of the array field `key`.
    pub fn item(&self, key: &str, i: usize, v: &'a Value) -> Result<Obj<'a>, ImportError> {
        let name = format!("{}[{i}]", self.name(key));
        if !v.is_object() {
            return Err(self.err(&format!("{key}[{i}]"), "expected an object"));
        }
        Ok(self.child(name, v))
    }

    fn child(&self, path: String, v: &'a Value) -> Obj<'a> {
        Obj {
            file: self.file,
            line: self.line,
            path,
            v,
        }
    }
}

/// A finite number (integers included).
pub fn number(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

/// The latest a time in seconds may be: a Unix instant in the year 2286, or a duration of 317
/// years; past it a value is a unit slip (ms or ns) or garbage.
pub const LATEST_S: f64 = 1e10;

/// A time in seconds (see [`LATEST_S`]).
pub fn seconds(v: &Value) -> Option<f64> {
    number(v).filter(|x| (0.0..=LATEST_S).contains(x))
}

/// A non-negative whole number that fits a `u32` (token counts), from an integer or an integral float.
pub fn count(v: &Value) -> Option<u32> {
    let x = number(v)?;
    (x >= 0.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX)).then_some(x as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_literals_outside_strings_become_strings() {
        let s = standard(r#"{"a": Infinity, "b": [NaN, -Infinity], "c": "NaN Infinity \" NaN"}"#);
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["a"], "Infinity");
        assert_eq!(v["b"][0], "NaN");
        assert_eq!(v["b"][1], "-Infinity");
        assert_eq!(v["c"], "NaN Infinity \" NaN");
    }

    #[test]
    fn a_truncated_document_says_so_with_the_file() {
        let e = parse("f.json", None, r#"{"a": [1, 2"#).unwrap_err();
        assert!(e.to_string().starts_with("f.json: line 1, column "), "{e}");
        assert!(e.to_string().contains("ends early"), "{e}");
    }
}
