//! The committed list of known differences between a real server and the mock, each with its
//! reason (`conformance/known-differences.toml`). A difference the list names is reported as known
//! and does not fail the check; an entry that matches nothing is stale and is reported too.

use super::compare::{Difference, Kind};
use serde::Deserialize;

/// One entry: `case` and `what` are patterns where `*` matches any run of characters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Known {
    pub case: String,
    pub kind: String,
    #[serde(default = "any")]
    pub what: String,
    pub reason: String,
}

fn any() -> String {
    "*".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    difference: Vec<Known>,
}

/// The list, parsed and checked: every kind must be one of the check's kinds.
pub fn parse(text: &str) -> Result<Vec<Known>, String> {
    let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
    for k in &f.difference {
        if !Kind::ALL.iter().any(|x| x.name() == k.kind) {
            let names: Vec<&str> = Kind::ALL.iter().map(|x| x.name()).collect();
            return Err(format!(
                "unknown kind {:?} (case {:?}); kinds are {}",
                k.kind,
                k.case,
                names.join(", ")
            ));
        }
        if k.reason.trim().is_empty() {
            return Err(format!("entry for case {:?} has no reason", k.case));
        }
    }
    Ok(f.difference)
}

/// Marks the differences the list names; returns the indices of entries that matched nothing.
pub fn apply(diffs: &mut [Difference], known: &[Known]) -> Vec<usize> {
    let mut used = vec![false; known.len()];
    for d in diffs.iter_mut() {
        if let Some(i) = known.iter().position(|k| {
            k.kind == d.kind.name() && matches(&k.case, &d.case) && matches(&k.what, &d.what)
        }) {
            used[i] = true;
            d.known = Some(known[i].reason.clone());
        }
    }
    (0..known.len()).filter(|i| !used[*i]).collect()
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters.
pub fn matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_runs() {
        assert!(matches("*", ""));
        assert!(matches("native_*", "native_logprobs"));
        assert!(matches(
            "*.meta_info.*_ts",
            ".meta_info.request_received_ts"
        ));
        assert!(!matches("native_*", "plain"));
        assert!(!matches("a*b*c", "acb"));
        assert!(matches("plain", "plain"));
    }

    #[test]
    fn list_entries_mark_differences_and_stale_entries_are_named() {
        let known = parse(
            "[[difference]]\ncase = \"info_*\"\nkind = \"key-missing\"\nreason = \"r\"\n\
             [[difference]]\ncase = \"x\"\nkind = \"status\"\nreason = \"never\"\n",
        )
        .unwrap();
        let mut d = vec![Difference {
            case: "info_server_info".into(),
            kind: Kind::KeyMissing,
            what: ".a".into(),
            real: String::new(),
            mock: String::new(),
            known: None,
        }];
        assert_eq!(apply(&mut d, &known), vec![1]);
        assert_eq!(d[0].known.as_deref(), Some("r"));
        assert!(parse("[[difference]]\ncase = \"x\"\nkind = \"nope\"\nreason = \"r\"\n").is_err());
        assert!(
            parse("[[difference]]\ncase = \"x\"\nkind = \"status\"\nreason = \" \"\n").is_err()
        );
    }
}
