//! Prompts of an exact token length without a tokenizer: seeded random token ids, unique per request,
//! so that no prefix cache can serve them.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// What a request sends as its prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Prompt {
    /// Token ids, sent as `input_ids` (SGLang) or a token-array `prompt` (OpenAI completions).
    TokenIds(Vec<u32>),
    /// Plain text (chat, or servers that only take text).
    Text(String),
}

impl Prompt {
    /// Exact length in tokens, for token-id prompts.
    pub fn token_len(&self) -> Option<u32> {
        match self {
            Self::TokenIds(ids) => Some(u32::try_from(ids.len()).unwrap_or(u32::MAX)),
            Self::Text(_) => None,
        }
    }
}

/// Draws prompts from a seed; the `n`th prompt is the same on every run with the same seed.
#[derive(Clone, Debug)]
pub struct PromptGen {
    /// Base seed.
    pub seed: u64,
    /// Smallest token id drawn (inclusive).
    pub id_min: u32,
    /// Largest token id drawn (exclusive).
    pub id_max: u32,
    /// The first id of every prompt is below this (exclusive; at least `id_max`): the server's whole
    /// vocabulary when it reports one, so that more prompts can begin differently.
    pub first_max: u32,
}

/// Default id range [100, 4000): valid for tiny test models with a 4096 vocabulary too.
pub const DEFAULT_ID_RANGE: (u32, u32) = (100, 4000);

impl PromptGen {
    /// A generator with the default id range.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            id_min: DEFAULT_ID_RANGE.0,
            id_max: DEFAULT_ID_RANGE.1,
            first_max: DEFAULT_ID_RANGE.1,
        }
    }

    /// A generator over `[id_min, id_max)`; errors on an empty or one-id range.
    pub fn with_range(seed: u64, id_min: u32, id_max: u32) -> Result<Self, String> {
        if id_max <= id_min.saturating_add(1) {
            return Err(format!(
                "--token-id-min {id_min} and --token-id-max {id_max}: the range [min, max) needs at least two ids"
            ));
        }
        Ok(Self {
            seed,
            id_min,
            id_max,
            first_max: id_max,
        })
    }

    /// The same generator with first ids drawn from `[id_min, vocab_size)` when that is wider than
    /// the id range (a server's vocabulary: every id below it is valid).
    pub fn with_vocabulary(&self, vocab_size: u32) -> Self {
        Self {
            first_max: vocab_size.max(self.id_max),
            ..self.clone()
        }
    }

    /// The same id range with another seed.
    pub fn reseeded(&self, seed: u64) -> Self {
        Self {
            seed,
            ..self.clone()
        }
    }

    fn rng(&self, stream: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stream);
        rng
    }

    /// Exactly `n` token ids for request number `index`. The first id is `index + seed` modulo the
    /// first ids' range (`[id_min, first_max)`), so consecutive indices never share even a one-token
    /// prefix (a radix cache matches single tokens) until they have used every first id, and another
    /// seed shifts them all; every other id is drawn at random from the id range, so two prompts
    /// share a prefix of length k with probability about (1/range)^k beyond that.
    pub fn token_ids(&self, n: u32, index: u64) -> Vec<u32> {
        let mut rng = self.rng(index);
        let range = u64::from(self.first_max.max(self.id_max) - self.id_min);
        let first = self.id_min + u32::try_from(index.wrapping_add(self.seed) % range).unwrap_or(0);
        (0..n)
            .map(|i| {
                if i == 0 {
                    first
                } else {
                    rng.random_range(self.id_min..self.id_max)
                }
            })
            .collect()
    }

    /// A text prompt of roughly `n` tokens for text-only servers: a unique random prefix, then common
    /// words (most tokenizers give about one token per word). The server's reported `prompt_tokens`
    /// is the true length.
    pub fn text(&self, n: u32, index: u64) -> String {
        let mut rng = self.rng(index);
        const WORDS: [&str; 8] = ["the", "cat", "sat", "on", "a", "mat", "and", "slept"];
        let mut s = format!("{:016x}{:016x}", rng.random::<u64>(), rng.random::<u64>());
        for _ in 0..n.saturating_sub(8) {
            s.push(' ');
            s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn exact_length_and_range(n in 0u32..5000, idx in 0u64..1000, seed in any::<u64>()) {
            let g = PromptGen::new(seed);
            let ids = g.token_ids(n, idx);
            prop_assert_eq!(ids.len(), n as usize);
            prop_assert!(ids.iter().all(|&t| (100..4000).contains(&t)));
        }
    }

    #[test]
    fn consecutive_prompts_never_share_the_first_token() {
        let g = PromptGen::new(3);
        let firsts: std::collections::HashSet<u32> = (0..3900u64)
            .map(|i| g.token_ids(4, (7 << 40) | i)[0])
            .collect();
        assert_eq!(firsts.len(), 3900);
    }

    #[test]
    fn a_vocabulary_gives_more_first_tokens() {
        let g = PromptGen::new(3).with_vocabulary(32_000);
        let firsts: std::collections::HashSet<u32> = (0..10_000u64)
            .map(|i| g.token_ids(4, (7 << 40) | i)[0])
            .collect();
        assert_eq!(firsts.len(), 10_000);
        let ids = g.token_ids(64, 5);
        assert!((100..32_000).contains(&ids[0]));
        assert!(ids[1..].iter().all(|t| (100..4000).contains(t)));
        // A vocabulary narrower than the id range changes nothing.
        assert_eq!(
            PromptGen::new(3).with_vocabulary(50).token_ids(8, 9),
            PromptGen::new(3).token_ids(8, 9)
        );
    }

    #[test]
    fn deterministic_and_unique_prefixes() {
        let g = PromptGen::new(7);
        assert_eq!(g.token_ids(64, 3), g.token_ids(64, 3));
        let a = g.token_ids(64, 1);
        let b = g.token_ids(64, 2);
        assert_ne!(a[..8], b[..8]);
    }

    #[test]
    fn bad_range_is_an_error() {
        assert!(PromptGen::with_range(1, 5, 6).is_err());
        assert!(PromptGen::with_range(1, 6, 5).is_err());
        assert!(PromptGen::with_range(1, 0, 2).is_ok());
    }
}
