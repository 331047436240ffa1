//! Context lengths of a sweep: the list syntax (`1k,2k,185k`, k = 1,000 tokens) and the default.

/// The default sweep: 1k to 185k tokens, the contexts of the seed's deployment.
pub const DEFAULT_CONTEXTS: &str = "1k,2k,4k,8k,16k,32k,64k,128k,185k";

/// Why a context list was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContextsError {
    /// One entry is not a number.
    #[error("context length {0:?} is not a number (examples: 1k, 512, 185k)")]
    NotANumber(String),
    /// One entry is below 1 token or beyond [`super::MAX_TOKENS`].
    #[error("context length {0:?} is out of range (1 to {max} tokens)", max = super::MAX_TOKENS)]
    OutOfRange(String),
    /// The list is empty.
    #[error("no context lengths given")]
    Empty,
    /// One item is empty (`1k,,2k`).
    #[error(transparent)]
    EmptyItem(#[from] super::list::EmptyItem),
}

/// Parse a context list such as `1k,2k,185k` or `512,1024` (k = 1,000 tokens).
pub fn parse_contexts(s: &str) -> Result<Vec<u32>, ContextsError> {
    let mut out = Vec::new();
    for part in super::list::items(s)? {
        let (num, mult) = match part.strip_suffix(['k', 'K']) {
            Some(n) => (n, 1000.0),
            None => (part, 1.0),
        };
        let v: f64 = num
            .parse()
            .map_err(|_| ContextsError::NotANumber(part.to_string()))?;
        let tokens = v * mult;
        if !tokens.is_finite() || tokens < 1.0 || tokens > f64::from(super::MAX_TOKENS) {
            return Err(ContextsError::OutOfRange(part.to_string()));
        }
        out.push(tokens.round() as u32);
    }
    if out.is_empty() {
        return Err(ContextsError::Empty);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_parse() {
        assert_eq!(
            parse_contexts("1k, 2K,512,185k").unwrap(),
            vec![1000, 2000, 512, 185_000]
        );
        assert_eq!(parse_contexts(DEFAULT_CONTEXTS).unwrap().len(), 9);
        assert!(parse_contexts("abc").is_err());
        assert!(parse_contexts("").is_err());
        assert_eq!(
            parse_contexts("1k,,2k"),
            Err(ContextsError::EmptyItem(crate::plan::list::EmptyItem(
                "1k,,2k".into()
            )))
        );
        assert!(parse_contexts("0").is_err());
        assert!(parse_contexts("1e20").is_err());
        // A context is a prompt built whole: four billion tokens would take 16 GB.
        assert!(parse_contexts("4000000k").is_err());
        assert_eq!(parse_contexts("16777216").unwrap(), vec![16_777_216]);
    }
}
