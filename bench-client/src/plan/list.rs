//! Comma lists as flags write them (`1k,2k,185k`, `1,2,4`, `ttft=500,tpot=50`): every item is
//! trimmed, and none may be empty.

/// A list with an empty item: two commas in a row, or one at an end.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} has an empty item (two commas in a row, or one at an end)")]
pub struct EmptyItem(pub String);

/// The items of the comma list `s`, each trimmed; none for a blank `s` (the caller says whether a
/// list may be empty). An empty item is refused: it is a typo, not a value.
pub fn items(s: &str) -> Result<Vec<&str>, EmptyItem> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let items: Vec<&str> = s.split(',').map(str::trim).collect();
    if items.iter().any(|i| i.is_empty()) {
        return Err(EmptyItem(s.to_string()));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_trimmed_and_none_may_be_empty() {
        assert_eq!(items(" 1k, 2k ,3k").unwrap(), vec!["1k", "2k", "3k"]);
        assert_eq!(items("  ").unwrap(), Vec::<&str>::new());
        for s in ["1k,,2k", "1k,", ",1k", "1k, ,2k", ","] {
            assert_eq!(items(s), Err(EmptyItem(s.to_string())), "{s:?}");
        }
    }
}
