//! Text prompts of an exact token count under a local Hugging Face `tokenizer.json` (feature
//! `tokenizer`), for servers that only take text: text built from the tokenizer's own vocabulary,
//! re-encoded and adjusted until it encodes to exactly N tokens, with a unique random start per request.

use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokenizers::Tokenizer;

/// Most vocabulary entries kept for building prompts.
const POOL_MAX: usize = 4096;
/// Fewest word-initial entries (decoded text starting with a space) for the pool to use only those.
const WORD_POOL_MIN: usize = 64;
/// Re-encode rounds before giving up on an exact length.
const MAX_ROUNDS: u32 = 64;

/// Builds exact-length text prompts with one tokenizer.
pub struct TextPrompts {
    tokenizer: Tokenizer,
    /// Vocabulary ids whose decoded text encodes back to that one id.
    pool: Vec<u32>,
    seed: u64,
    path: PathBuf,
}

impl std::fmt::Debug for TextPrompts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextPrompts")
            .field("path", &self.path)
            .field("pool", &self.pool.len())
            .field("seed", &self.seed)
            .finish()
    }
}

impl TextPrompts {
    /// Load `path` (a `tokenizer.json`) and pick the vocabulary prompts are built from.
    pub fn from_file(path: &Path, seed: u64) -> Result<Self, String> {
        if !path.is_file() {
            return Err(format!(
                "tokenizer file {} does not exist or is not a file",
                path.display()
            ));
        }
        let tokenizer = Tokenizer::from_file(path).map_err(|e| {
            format!(
                "cannot load {} as a Hugging Face tokenizer.json: {e}",
                path.display()
            )
        })?;
        let pool = pick_pool(&tokenizer, seed);
        if pool.len() < 2 {
            return Err(format!(
                "tokenizer {} has fewer than two vocabulary entries that encode back to themselves; \
                 cannot build prompts from it",
                path.display()
            ));
        }
        Ok(Self {
            tokenizer,
            pool,
            seed,
            path: path.to_path_buf(),
        })
    }

    /// The tokenizer file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens of `text` under this tokenizer, without special tokens (a server may add a BOS token or
    /// a chat template around it).
    pub fn count(&self, text: &str) -> Result<u32, String> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| format!("{}: cannot encode text: {e}", self.path.display()))?;
        Ok(u32::try_from(enc.get_ids().len()).unwrap_or(u32::MAX))
    }

    fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| format!("{}: cannot decode ids: {e}", self.path.display()))
    }

    /// Text of exactly `n` tokens for request number `index` (the same on every call with the same
    /// seed). Its first token is `index + seed` modulo the pool, so consecutive requests start
    /// differently, and the rest is drawn at random, as for token-id prompts.
    pub fn text(&self, n: u32, index: u64) -> Result<String, String> {
        if n == 0 {
            return Ok(String::new());
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(index);
        let len = self.pool.len();
        let first =
            self.pool[usize::try_from(index.wrapping_add(self.seed) % len as u64).unwrap_or(0)];
        let mut ids = Vec::with_capacity(n as usize);
        ids.push(first);
        let draw = |rng: &mut ChaCha8Rng| self.pool[rng.random_range(0..len)];
        ids.extend((1..n).map(|_| draw(&mut rng)));
        let mut last = 0;
        for _ in 0..MAX_ROUNDS {
            let text = self.decode(&ids)?;
            let got = self.count(&text)?;
            if got == n {
                return Ok(text);
            }
            last = got;
            if got > n {
                // Keep the first id: it is what makes this prompt's start unique.
                let cut = ((got - n) as usize).min(ids.len() - 1).max(1);
                ids.truncate((ids.len() - cut).max(1));
            } else {
                ids.extend((0..n - got).map(|_| draw(&mut rng)));
            }
        }
        Err(format!(
            "could not build a text of exactly {n} tokens under {} ({MAX_ROUNDS} tries, last {last} tokens)",
            self.path.display()
        ))
    }
}

/// Vocabulary ids (no added or special tokens) whose decoded text is printable and encodes back to
/// that one id, in a seeded random order; only word-initial ones (text starting with a space) when
/// there are enough, since those keep their boundaries when joined.
fn pick_pool(tok: &Tokenizer, seed: u64) -> Vec<u32> {
    let added = tok.get_added_tokens_decoder();
    let mut ids: Vec<u32> = tok
        .get_vocab(false)
        .into_values()
        .filter(|id| !added.contains_key(id))
        .collect();
    ids.sort_unstable();
    ids.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut words = Vec::new();
    let mut others = Vec::new();
    for id in ids {
        if words.len() >= POOL_MAX {
            break;
        }
        let Ok(text) = tok.decode(&[id], true) else {
            continue;
        };
        if text.trim().is_empty() || text.chars().any(|c| c.is_control() || c == '\u{fffd}') {
            continue;
        }
        let round_trip = tok
            .encode(text.as_str(), false)
            .is_ok_and(|e| e.get_ids() == [id]);
        if !round_trip {
            continue;
        }
        if text.starts_with(' ') && text[1..].chars().all(char::is_alphabetic) {
            words.push(id);
        } else if others.len() < POOL_MAX {
            others.push(id);
        }
    }
    if words.len() >= WORD_POOL_MIN {
        words
    } else {
        words.extend(others);
        words.truncate(POOL_MAX);
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
    use tokenizers::normalizers::NormalizerWrapper;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::processors::PostProcessorWrapper;
    use tokenizers::{AddedToken, TokenizerBuilder, TokenizerImpl};

    /// A byte-level BPE trained here on generated text, saved as tokenizer.json.
    fn bpe_file(dir: &Path) -> PathBuf {
        let mut tok: TokenizerImpl<
            BPE,
            NormalizerWrapper,
            ByteLevel,
            PostProcessorWrapper,
            ByteLevel,
        > = TokenizerBuilder::new()
            .with_model(BPE::default())
            .with_normalizer(None)
            .with_pre_tokenizer(Some(ByteLevel::default()))
            .with_post_processor(None)
            .with_decoder(Some(ByteLevel::default()))
            .build()
            .unwrap();
        let mut trainer = BpeTrainerBuilder::new()
            .vocab_size(400)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(vec![AddedToken::from("<s>", true)])
            .show_progress(false)
            .build();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let words = [
            "prefill", "decode", "token", "cache", "chunk", "stream", "server", "rate",
        ];
        let lines: Vec<String> = (0..400)
            .map(|_| {
                (0..12)
                    .map(|_| {
                        let w = words[rng.random_range(0..words.len())];
                        let cut = rng.random_range(2..=w.len());
                        &w[..cut]
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        tok.train(&mut trainer, lines.iter()).unwrap();
        let path = dir.join("tokenizer.json");
        tok.save(&path, false).unwrap();
        path
    }

    #[test]
    fn bpe_prompts_have_exact_counts_and_unique_starts() {
        let dir = tempfile::tempdir().unwrap();
        let p = TextPrompts::from_file(&bpe_file(dir.path()), 7).unwrap();
        for n in [1u32, 2, 3, 17, 100, 1000] {
            for index in 0..3 {
                let t = p.text(n, index).unwrap();
                assert_eq!(p.count(&t).unwrap(), n, "n={n} index={index}: {t:?}");
                assert_eq!(t, p.text(n, index).unwrap(), "deterministic");
            }
            if n >= 3 {
                assert_ne!(p.text(n, 0).unwrap(), p.text(n, 1).unwrap());
            }
        }
    }

    #[test]
    fn missing_and_bad_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json");
        let e = TextPrompts::from_file(&missing, 1).unwrap_err();
        assert!(
            e.contains("does not exist") && e.contains("nope.json"),
            "{e}"
        );
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"model\": 5").unwrap();
        let e = TextPrompts::from_file(&bad, 1).unwrap_err();
        assert!(e.contains("cannot load") && e.contains("bad.json"), "{e}");
    }
}
