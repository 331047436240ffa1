//! A radix tree over token ids, like SGLang's RadixCache: longest-prefix match, lock references
//! that protect a running request's prefix, and LRU eviction of unlocked leaves.
//!
//! A node's key is a range of a shared token buffer (a request's prompt), so that inserting a
//! prompt copies none of it, as long as the range is at least a quarter of its buffer; a shorter
//! range is copied into a buffer of its own. The tree then never keeps more than four times its
//! tokens in memory, however much of each prompt was a cache hit or has been evicted.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

/// Token ids shared between a request and the cache nodes that hold ranges of them.
pub type Tokens = Arc<Vec<u32>>;

/// A range of a shared token buffer: what a node of the tree holds.
#[derive(Debug, Clone, Default)]
pub struct Key {
    src: Tokens,
    start: usize,
    end: usize,
}

impl Key {
    /// `range` of `src` (clamped to it).
    pub fn new(src: &Tokens, range: Range<usize>) -> Self {
        let end = range.end.min(src.len());
        Self::share_or_copy(src, range.start.min(end), end)
    }

    /// A key of its own tokens.
    pub fn owned(tokens: Vec<u32>) -> Self {
        let end = tokens.len();
        Key {
            src: Arc::new(tokens),
            start: 0,
            end,
        }
    }

    /// `start..end` of `src`: shared when it is at least a quarter of `src`, else copied.
    fn share_or_copy(src: &Tokens, start: usize, end: usize) -> Self {
        if (end - start) * 4 >= src.len() {
            Key {
                src: Arc::clone(src),
                start,
                end,
            }
        } else {
            Self::owned(src[start..end].to_vec())
        }
    }

    /// The tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.src[self.start..self.end]
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    /// The tokens from `at` on.
    fn from(&self, at: usize) -> Key {
        Self::share_or_copy(&self.src, self.start + at, self.end)
    }

    /// The first `at` tokens.
    fn to(&self, at: usize) -> Key {
        Self::share_or_copy(&self.src, self.start, self.start + at)
    }

    /// The tokens of the buffer this key keeps alive.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.src.len()
    }
}

/// Index of a node in the tree; the root is [`RadixTree::ROOT`].
pub type NodeId = usize;

#[derive(Debug, Clone)]
struct Node {
    key: Key,
    parent: NodeId,
    children: HashMap<u32, NodeId>,
    lock_ref: usize,
    last_access: u64,
    alive: bool,
}

/// The prefix cache.
#[derive(Debug, Clone)]
pub struct RadixTree {
    nodes: Vec<Node>,
    free: Vec<NodeId>,
    clock: u64,
    size: usize,
    /// The evictable nodes (alive unlocked leaves but the root) by (last access, id): what
    /// [`RadixTree::evict`] takes from, kept up to date by every change of a node.
    leaves: BTreeSet<(u64, NodeId)>,
}

impl Default for RadixTree {
    fn default() -> Self {
        Self::new()
    }
}

impl RadixTree {
    pub const ROOT: NodeId = 0;

    pub fn new() -> Self {
        RadixTree {
            nodes: vec![Node {
                key: Key::default(),
                parent: 0,
                children: HashMap::default(),
                lock_ref: 0,
                last_access: 0,
                alive: true,
            }],
            free: Vec::new(),
            clock: 0,
            size: 0,
            leaves: BTreeSet::new(),
        }
    }

    /// Whether `id` is evictable.
    fn evictable(&self, id: NodeId) -> bool {
        let n = &self.nodes[id];
        id != Self::ROOT && n.alive && n.children.is_empty() && n.lock_ref == 0
    }

    /// Takes `id` out of the evictable set before a change to it (its last access, locks or
    /// children); [`RadixTree::relist`] puts it back after.
    fn unlist(&mut self, id: NodeId) {
        if self.evictable(id) {
            self.leaves.remove(&(self.nodes[id].last_access, id));
        }
    }

    /// Puts `id` in the evictable set if it is evictable after a change.
    fn relist(&mut self, id: NodeId) {
        if self.evictable(id) {
            self.leaves.insert((self.nodes[id].last_access, id));
        }
    }

    /// Sets the last access of `id`, keeping the evictable set in order.
    fn touch(&mut self, id: NodeId, now: u64) {
        self.unlist(id);
        self.nodes[id].last_access = now;
        self.relist(id);
    }

    /// Tokens held by the tree.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Tokens held by nodes that no request locks (evictable).
    pub fn evictable_size(&self) -> usize {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| *i != Self::ROOT && n.alive && n.lock_ref == 0)
            .map(|(_, n)| n.key.len())
            .sum()
    }

    /// Empties the tree (what `/flush_cache` does).
    pub fn reset(&mut self) {
        *self = RadixTree::new();
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// A new node below `parent`, not yet in the evictable set (its caller lists it once the node
    /// has its place).
    fn alloc(&mut self, key: Key, parent: NodeId) -> NodeId {
        let node = Node {
            key,
            parent,
            children: HashMap::default(),
            lock_ref: 0,
            last_access: self.clock,
            alive: true,
        };
        if let Some(id) = self.free.pop() {
            self.nodes[id] = node;
            id
        } else {
            self.nodes.push(node);
            self.nodes.len() - 1
        }
    }

    /// Splits `child` so that its first `at` tokens become a new parent node; returns that node.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let parent = self.nodes[child].parent;
        let key = &self.nodes[child].key;
        let (head, tail) = (key.to(at), key.from(at));
        let first = head.tokens()[0];
        let tail_first = tail.tokens()[0];
        let mid = self.alloc(head, parent);
        self.nodes[mid].lock_ref = self.nodes[child].lock_ref;
        self.nodes[mid].last_access = self.nodes[child].last_access;
        self.nodes[mid].children.insert(tail_first, child);
        self.nodes[child].key = tail;
        self.nodes[child].parent = mid;
        self.nodes[parent].children.insert(first, mid);
        mid
    }

    /// Longest cached prefix of `tokens`: returns (matched length, node where it ends).
    /// Splits a node when the match ends inside it, so the returned node covers exactly the match.
    pub fn match_prefix(&mut self, tokens: &[u32]) -> (usize, NodeId) {
        let now = self.tick();
        self.match_from(Self::ROOT, tokens, now)
    }

    /// The longest match of `tokens` below `node`, touching the nodes it passes at `now`.
    fn match_from(&mut self, mut node: NodeId, tokens: &[u32], now: u64) -> (usize, NodeId) {
        let mut pos = 0;
        while pos < tokens.len() {
            let Some(&child) = self.nodes[node].children.get(&tokens[pos]) else {
                break;
            };
            let common = common_prefix(self.nodes[child].key.tokens(), &tokens[pos..]);
            if common < self.nodes[child].key.len() {
                let mid = self.split(child, common);
                self.touch(mid, now);
                return (pos + common, mid);
            }
            self.touch(child, now);
            pos += common;
            node = child;
        }
        (pos, node)
    }

    /// Inserts the tokens of `key`; returns (tokens newly added, node covering the whole
    /// sequence).
    pub fn insert(&mut self, key: Key) -> (usize, NodeId) {
        let (matched, node) = self.match_prefix(key.tokens());
        self.add_leaf(key, matched, node)
    }

    /// Inserts the sequence that `node`'s prefix begins and `rest` ends, exactly as
    /// [`RadixTree::insert`] of the whole sequence does (the same nodes touched, split and
    /// added), without comparing the prefix again: a request's locked node stands for the
    /// tokens it has in the cache. Returns (tokens newly added, node covering the sequence).
    pub fn insert_below(&mut self, node: NodeId, rest: Key) -> (usize, NodeId) {
        let now = self.tick();
        // A match from the root passes every node above `node`, to its end.
        let mut up = node;
        while up != Self::ROOT {
            self.touch(up, now);
            up = self.nodes[up].parent;
        }
        let (matched, end) = self.match_from(node, rest.tokens(), now);
        self.add_leaf(rest, matched, end)
    }

    /// Adds the tokens of `key` from `matched` on as a leaf below `node` (where its first
    /// `matched` tokens end).
    fn add_leaf(&mut self, key: Key, matched: usize, node: NodeId) -> (usize, NodeId) {
        if matched == key.len() {
            return (0, node);
        }
        let rest = key.from(matched);
        let added = rest.len();
        let first = rest.tokens()[0];
        self.unlist(node);
        let leaf = self.alloc(rest, node);
        self.relist(leaf);
        self.nodes[node].children.insert(first, leaf);
        self.size += added;
        (added, leaf)
    }

    /// Depth (prefix length in tokens) of a node.
    pub fn depth(&self, mut node: NodeId) -> usize {
        let mut d = 0;
        while node != Self::ROOT {
            d += self.nodes[node].key.len();
            node = self.nodes[node].parent;
        }
        d
    }

    /// Protects the path from `node` to the root from eviction.
    pub fn lock(&mut self, mut node: NodeId) {
        while node != Self::ROOT {
            self.unlist(node);
            self.nodes[node].lock_ref += 1;
            node = self.nodes[node].parent;
        }
    }

    /// Undoes one [`RadixTree::lock`].
    pub fn unlock(&mut self, mut node: NodeId) {
        while node != Self::ROOT {
            let n = &mut self.nodes[node];
            n.lock_ref = n.lock_ref.saturating_sub(1);
            let parent = n.parent;
            self.relist(node);
            node = parent;
        }
    }

    /// Evicts least-recently-used unlocked leaves until `want` tokens are freed or nothing is
    /// evictable; returns the tokens freed.
    pub fn evict(&mut self, want: usize) -> usize {
        let mut freed = 0;
        while freed < want {
            let Some((_, id)) = self.leaves.pop_first() else {
                break;
            };
            let parent = self.nodes[id].parent;
            let len = self.nodes[id].key.len();
            let first = self.nodes[id].key.tokens()[0];
            self.nodes[parent].children.remove(&first);
            self.nodes[id].alive = false;
            self.nodes[id].key = Key::default();
            self.nodes[id].children = HashMap::default();
            self.free.push(id);
            self.size -= len;
            freed += len;
            self.relist(parent);
        }
        freed
    }
}

/// Length of the common prefix of `a` and `b`: whole 32-token chunks compared at once (a prompt of
/// 100k tokens is matched against the cache on every admission), then token by token.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    const CHUNK: usize = 32;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + CHUNK <= n && a[i..i + CHUNK] == b[i..i + CHUNK] {
        i += CHUNK;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(tokens: &[u32]) -> Key {
        Key::owned(tokens.to_vec())
    }

    #[test]
    fn match_insert_split() {
        let mut t = RadixTree::new();
        assert_eq!(t.insert(k(&[1, 2, 3, 4])).0, 4);
        assert_eq!(t.match_prefix(&[1, 2, 3, 4, 5]).0, 4);
        assert_eq!(t.match_prefix(&[1, 2, 9]).0, 2);
        assert_eq!(t.insert(k(&[1, 2, 7])).0, 1);
        assert_eq!(t.size(), 5);
        let (n, node) = t.match_prefix(&[1, 2]);
        assert_eq!((n, t.depth(node)), (2, 2));
        assert_eq!(t.match_prefix(&[9]).0, 0);
    }

    #[test]
    fn lru_eviction_respects_locks() {
        let mut t = RadixTree::new();
        let (_, a) = t.insert(k(&[1, 2, 3]));
        t.insert(k(&[4, 5]));
        t.lock(a);
        assert_eq!(t.evictable_size(), 2);
        assert_eq!(t.evict(10), 2);
        assert_eq!(t.match_prefix(&[4, 5]).0, 0);
        assert_eq!(t.match_prefix(&[1, 2, 3]).0, 3);
        t.unlock(a);
        t.insert(k(&[6]));
        // [1,2,3] was touched before [6] was inserted, so it goes first.
        assert_eq!(t.evict(1), 3);
        assert_eq!(t.match_prefix(&[6]).0, 1);
        t.reset();
        assert_eq!(t.size(), 0);
    }

    /// The evictable set as a scan of every node finds it.
    fn scanned(t: &RadixTree) -> BTreeSet<(u64, NodeId)> {
        (0..t.nodes.len())
            .filter(|&i| t.evictable(i))
            .map(|i| (t.nodes[i].last_access, i))
            .collect()
    }

    proptest! {
        /// Through any mix of matches, inserts, locks, unlocks and evictions, the evictable set
        /// kept up to date is the one a scan of every node finds, so eviction takes the same
        /// leaves in the same order as a heap built from a scan at each call.
        #[test]
        fn the_evictable_set_is_what_a_scan_finds(
            ops in prop::collection::vec((0u8..5, prop::collection::vec(0u32..3, 1..10), 0usize..12), 1..60),
        ) {
            let mut t = RadixTree::new();
            let mut locked: Vec<NodeId> = Vec::new();
            for (op, seq, n) in ops {
                match op {
                    0 => { t.match_prefix(&seq); }
                    1 => { t.insert(k(&seq)); }
                    2 => {
                        let (_, node) = t.insert(k(&seq));
                        t.lock(node);
                        locked.push(node);
                    }
                    3 => {
                        if !locked.is_empty() {
                            let node = locked.remove(n % locked.len());
                            t.unlock(node);
                        }
                    }
                    _ => {
                        let before = t.size();
                        let freed = t.evict(n);
                        prop_assert_eq!(t.size(), before - freed);
                    }
                }
                prop_assert_eq!(&t.leaves, &scanned(&t));
            }
        }
    }

    /// Tokens of the distinct buffers the tree's live nodes keep alive.
    fn held(t: &RadixTree) -> usize {
        let mut seen = std::collections::HashSet::new();
        t.nodes
            .iter()
            .filter(|n| n.alive && n.key.len() > 0 && seen.insert(Arc::as_ptr(&n.key.src)))
            .map(|n| n.key.held())
            .sum()
    }

    proptest! {
        /// Ranges of shared buffers (prompts whose heads are cache hits, inserted chunk by
        /// chunk) give the tree that copies of them give, and the buffers kept alive hold at most
        /// four times the tree's tokens, before and after evictions.
        #[test]
        fn shared_ranges_match_copies_and_keep_at_most_four_times_the_tree(
            seqs in prop::collection::vec((prop::collection::vec(0u32..3, 1..40), 1usize..12), 1..10),
            evict in 0usize..60,
        ) {
            let (mut shared, mut copied) = (RadixTree::new(), RadixTree::new());
            for (s, chunk) in &seqs {
                let src: Tokens = Arc::new(s.clone());
                let (hit, mut node) = shared.match_prefix(s);
                let (hit2, mut node2) = copied.match_prefix(s);
                prop_assert_eq!(hit, hit2);
                let mut at = hit;
                while at < s.len() {
                    let to = (at + chunk).min(s.len());
                    node = shared.insert_below(node, Key::new(&src, at..to)).1;
                    node2 = copied.insert_below(node2, k(&s[at..to])).1;
                    at = to;
                }
                prop_assert!(held(&shared) <= 4 * shared.size());
            }
            prop_assert_eq!(shared.size(), copied.size());
            prop_assert_eq!(shared.evict(evict), copied.evict(evict));
            prop_assert!(held(&shared) <= 4 * shared.size());
            for (s, _) in &seqs {
                prop_assert_eq!(shared.match_prefix(s).0, copied.match_prefix(s).0);
            }
        }
    }

    proptest! {
        #[test]
        fn size_equals_distinct_prefix_tokens(seqs in prop::collection::vec(prop::collection::vec(0u32..4, 1..8), 1..12), evict in 0usize..20) {
            let mut t = RadixTree::new();
            for s in &seqs { t.insert(k(s)); }
            for s in &seqs { prop_assert_eq!(t.match_prefix(s).0, s.len()); }
            let before = t.size();
            let freed = t.evict(evict);
            prop_assert_eq!(t.size(), before - freed);
            prop_assert!(freed >= evict.min(before));
            // Every remaining match is a prefix of some inserted sequence.
            for s in &seqs { prop_assert!(t.match_prefix(s).0 <= s.len()); }
        }
    }
}
