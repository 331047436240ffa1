//! The built-in deterministic tokenizer: one token per whitespace-separated word.
//!
//! Rule: `text` is split on Unicode whitespace; each word becomes one token whose id is the
//! 64-bit FNV-1a hash of its UTF-8 bytes modulo the vocabulary size. So a prompt of N words is
//! exactly N tokens. Output token `id` decodes to the text `" t{id}"` (never empty), which the
//! same rule tokenizes back to one token per output token.

/// Tokenizes text into token ids, one per whitespace-separated word.
pub fn encode(text: &str, vocab_size: u32) -> Vec<u32> {
    text.split_whitespace()
        .map(|w| word_id(w, vocab_size))
        .collect()
}

/// Token id of one word.
pub fn word_id(word: &str, vocab_size: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in word.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(vocab_size.max(1))) as u32
}

/// Text of one output token.
pub fn decode_token(id: u32) -> String {
    format!(" t{id}")
}

/// Text of a run of output tokens.
pub fn decode(ids: &[u32]) -> String {
    ids.iter().map(|i| decode_token(*i)).collect()
}

/// Appends the text of a run of output tokens to `out`, as [`decode`] spells it. The text is a
/// space, a letter and digits per token: it is also its own JSON string contents (nothing to
/// escape).
pub fn decode_into(ids: &[u32], out: &mut Vec<u8>) {
    let mut num = itoa::Buffer::new();
    for id in ids {
        out.extend_from_slice(b" t");
        out.extend_from_slice(num.format(*id).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_tokens_and_deterministic() {
        let a = encode("hello  world\nagain", 32000);
        assert_eq!(a.len(), 3);
        assert_eq!(a, encode("hello world again", 32000));
        assert!(a.iter().all(|t| *t < 32000));
        assert_eq!(encode(&decode(&[5, 6, 7]), 32000).len(), 3);
        assert!(encode("   ", 10).is_empty());
    }

    #[test]
    fn decoded_text_is_its_own_json_contents() {
        let ids = [0, 5, 31_999, u32::MAX];
        let mut out = Vec::new();
        decode_into(&ids, &mut out);
        let json = serde_json::to_string(&decode(&ids)).unwrap();
        assert_eq!(out, json.as_bytes()[1..json.len() - 1]);
    }
}
