//! Mooncake prompts, block by block. A hash id always stands for the same tokens under one seed (and
//! prompt salt), so requests whose `hash_ids` start alike share exactly those blocks, and a radix cache
//! hits where production hit.
//!
//! - Tokens 1.. of a block are a window of a fixed random table, where a keyed hash of (seed, id)
//!   puts it: nothing is generated per request, and a block cut short by `input_length` is a prefix
//!   of the whole block.
//! - Token 0 is the block's rank among the blocks that follow the same block (its siblings), shifted
//!   by the seed: siblings differ in their first token, so two prompts share no token past their
//!   common blocks. Exact while no block has more followers than the id range (3,900 by default); past
//!   that, a follower can share its first token with one before it (one token, or two by chance).
//! - `input_length` beyond the listed blocks is filled with the request's own tokens, a follower of
//!   its last block like any other; ids beyond `ceil(input_length / block size)` are not used.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use crate::plan::prompt::PromptGen;

/// A block of a request: its id and its first-token rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Block {
    id: u64,
    rank: u32,
}

impl Block {
    /// The block's hash id.
    pub(super) fn id(&self) -> u64 {
        self.id
    }
}

/// Hashes the maps' block ids with [`mix`]: SipHash took longer than the rest of reading a trace's
/// blocks, and the ids come from a file, not from an adversary.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = mix(self.0 ^ n);
    }
}

type IdMap = HashMap<u64, u32, BuildHasherDefault<IdHasher>>;

/// Block ids numbered in order of first sight (`0, 1, 2, ...`): ids below [`IdSlots::DENSE`] (a
/// Mooncake trace numbers its blocks from 0) are looked up in a table, others hashed.
#[derive(Debug, Default)]
pub(super) struct IdSlots {
    dense: Vec<u32>,
    sparse: IdMap,
    len: u32,
}

impl IdSlots {
    /// Ids below this are table entries (at most 16 MiB of table).
    const DENSE: u64 = 1 << 22;
    const NONE: u32 = u32::MAX;

    /// The number of `id`, if seen.
    pub(super) fn get(&self, id: u64) -> Option<usize> {
        let n = if id < Self::DENSE {
            *self.dense.get(id as usize)?
        } else {
            *self.sparse.get(&id)?
        };
        (n != Self::NONE).then_some(n as usize)
    }

    /// The number of `id`, numbering it next if it is new; `true` when it is.
    pub(super) fn number(&mut self, id: u64) -> (usize, bool) {
        if let Some(n) = self.get(id) {
            return (n, false);
        }
        let n = self.len;
        self.len = self.len.saturating_add(1).min(Self::NONE - 1);
        if id < Self::DENSE {
            let i = id as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, Self::NONE);
            }
            self.dense[i] = n;
        } else {
            self.sparse.insert(id, n);
        }
        (n as usize, true)
    }
}

/// Ranks handed out while a trace is read, in its order: a slice of a trace (`--trace-limit`) ranks
/// its blocks as the whole trace does.
#[derive(Debug, Default)]
pub(super) struct BlockTree {
    /// Each id seen: its place in `seen`.
    slot: IdSlots,
    /// Per id seen: its rank, and the followers ranked so far.
    seen: Vec<Ranks>,
    /// Followers ranked so far of no block (first blocks).
    root: u32,
}

#[derive(Debug, Clone, Copy)]
struct Ranks {
    rank: u32,
    followers: u32,
}

impl BlockTree {
    /// The next rank among the followers of the block in `parent` (`None`: of no block).
    fn next_follower(&mut self, parent: Option<usize>) -> u32 {
        let n = match parent {
            Some(p) => &mut self.seen[p].followers,
            None => &mut self.root,
        };
        let r = *n;
        *n = n.saturating_add(1);
        r
    }

    /// Pushes the blocks a request of `input_len` tokens uses onto `out`, ranking ids seen for the
    /// first time; returns the rank of the request's own tokens when the blocks do not cover it.
    pub(super) fn place(
        &mut self,
        ids: &[u64],
        input_len: u32,
        block_size: u32,
        out: &mut Vec<Block>,
    ) -> Option<u32> {
        let needed = input_len.div_ceil(block_size) as usize;
        let used = &ids[..needed.min(ids.len())];
        let mut parent = None;
        for &id in used {
            let (at, new) = self.slot.number(id);
            if new {
                let rank = self.next_follower(parent);
                self.seen.push(Ranks { rank, followers: 0 });
            }
            out.push(Block {
                id,
                rank: self.seen[at].rank,
            });
            parent = Some(at);
        }
        let covered = used.len() as u64 * u64::from(block_size);
        (covered < u64::from(input_len)).then(|| self.next_follower(parent))
    }
}

/// SplitMix64's finaliser: a bijection of u64 that mixes every bit into every other.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
/// Keeps the keys of a request's own tokens apart from the blocks' keys.
const OWN_DOMAIN: u64 = 0x0f11_0000_0000_0000;

/// Random words that blocks read windows of, made once per process: 2^16 words (256 KiB, which stays
/// in a core's cache while prompts are copied out of it). Copying a window is several times faster
/// than hashing each token, and the conversation trace has 93 million block tokens; windows may
/// overlap, which no prefix cache can see (token 0 differs).
fn table() -> &'static [u32] {
    static TABLE: OnceLock<Box<[u32]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..1u64 << 16)
            .map(|i| mix(i.wrapping_mul(GOLDEN)) as u32)
            .collect()
    })
}

/// The table mapped onto `[lo, lo + range)` (each word by a multiply and shift), made once per
/// range and kept for the process's most recent range: a prompt's tokens are then plain copies.
fn mapped(lo: u32, range: u64) -> Arc<[u32]> {
    type Mapped = (u32, u64, Arc<[u32]>);
    static MAPPED: Mutex<Option<Mapped>> = Mutex::new(None);
    let mut slot = MAPPED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((l, r, t)) = slot.as_ref() {
        if (*l, *r) == (lo, range) {
            return t.clone();
        }
    }
    let t: Arc<[u32]> = table()
        .iter()
        .map(|&w| lo + ((u64::from(w) * range) >> 32) as u32)
        .collect();
    *slot = Some((lo, range, t.clone()));
    t
}

/// Appends `n` tokens of `table` (the mapped table): `first` (already in range), then a window
/// of the table from `key`.
fn push_tokens(out: &mut Vec<u32>, table: &[u32], first: u32, key: u64, n: u32) {
    if n == 0 {
        return;
    }
    out.push(first);
    let mut at = key as usize & (table.len() - 1);
    let mut left = n as usize - 1;
    while left > 0 {
        let take = left.min(table.len() - at);
        out.extend_from_slice(&table[at..at + take]);
        left -= take;
        at = 0;
    }
}

/// The prompt of a request: `blocks` (the last one cut to `input_len`) from `shared`'s seed and id
/// range, then its own tokens (keyed by `own_seed` and `index`) with first-token rank `fill`.
pub(super) fn build(
    blocks: &[Block],
    fill: Option<u32>,
    input_len: u32,
    block_size: u32,
    shared: &PromptGen,
    own_seed: u64,
    index: u64,
) -> Vec<u32> {
    let lo = shared.id_min;
    let range = u64::from(shared.id_max.saturating_sub(shared.id_min)).max(1);
    let shift = shared.seed % range;
    let first = |rank: u32| lo + ((u64::from(rank) + shift) % range) as u32;
    let table = mapped(lo, range);
    let mut p = Vec::with_capacity(input_len as usize);
    for b in blocks {
        let n = block_size.min(input_len.saturating_sub(p.len() as u32));
        let key = mix(shared.seed ^ mix(b.id));
        push_tokens(&mut p, &table, first(b.rank), key, n);
    }
    if let Some(rank) = fill {
        let n = input_len.saturating_sub(p.len() as u32);
        let key = mix(own_seed ^ OWN_DOMAIN ^ mix(index));
        push_tokens(&mut p, &table, first(rank), key, n);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_numbered_in_order_of_first_sight_whether_small_or_large() {
        let mut slots = IdSlots::default();
        let ids = [
            7,
            u64::MAX,
            0,
            7,
            IdSlots::DENSE,
            IdSlots::DENSE - 1,
            0,
            u64::MAX,
        ];
        let got: Vec<(usize, bool)> = ids.iter().map(|&id| slots.number(id)).collect();
        assert_eq!(
            got,
            [
                (0, true),
                (1, true),
                (2, true),
                (0, false),
                (3, true),
                (4, true),
                (2, false),
                (1, false)
            ]
        );
        assert_eq!(slots.get(IdSlots::DENSE), Some(3));
        assert_eq!(slots.get(8), None);
        assert_eq!(slots.get(IdSlots::DENSE + 1), None);
    }

    #[test]
    fn a_cut_block_is_a_prefix_of_the_whole_block_and_ids_stay_in_range() {
        let g = PromptGen::with_range(9, 100, 110).unwrap();
        let whole = build(&[Block { id: 7, rank: 3 }], None, 16, 16, &g, 1, 0);
        for n in 1..16 {
            let cut = build(&[Block { id: 7, rank: 3 }], None, n, 16, &g, 1, 5);
            assert_eq!(cut[..], whole[..n as usize], "cut at {n}");
        }
        assert!(whole.iter().all(|t| (100..110).contains(t)));
        // Rank 3 shifted by the seed 9, in a range of 10 ids from 100.
        assert_eq!(whole[0], 102);
    }

    #[test]
    fn followers_of_one_block_get_distinct_ranks_and_the_fill_is_one_of_them() {
        let mut t = BlockTree::default();
        let mut out = Vec::new();
        assert_eq!(t.place(&[1, 2], 8, 4, &mut out), None);
        assert_eq!(t.place(&[1, 3], 7, 4, &mut out), None);
        // One block listed, nine tokens: the request's own five tokens follow block 1.
        assert_eq!(t.place(&[1], 9, 4, &mut out), Some(2));
        // Ids past the input are not used.
        assert_eq!(t.place(&[1, 2, 4], 5, 4, &mut out), None);
        let ranks: Vec<(u64, u32)> = out.iter().map(|b| (b.id, b.rank)).collect();
        assert_eq!(
            ranks,
            [(1, 0), (2, 0), (1, 0), (3, 1), (1, 0), (1, 0), (2, 0)]
        );
    }
}
