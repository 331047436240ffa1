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
        })
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

    /// Exactly `n` token ids for request number `index`. The first id is `index + seed` modulo the id
    /// range, so consecutive indices never share even a one-token prefix (a radix cache matches single
    /// tokens), and another seed shifts them all;
    /// every other id is drawn at random, so two prompts share a prefix of length k with probability
    /// about (1/range)^k beyond that.
    pub fn token_ids(&self, n: u32, index: u64) -> Vec<u32> {
        let mut rng = self.rng(index);
        let range = u64::from(self.id_max - self.id_min);
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
