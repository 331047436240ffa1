//! KV accounting: tokens in use (radix tree plus every active request's private tokens), making
//! room by evicting cache, and giving a request's KV back.

use super::{Engine, RequestState};
use crate::radix::RadixTree;

impl Engine {
    /// KV tokens in use: the radix tree plus every active request's private (unshared) tokens.
    pub(super) fn kv_used(&self) -> usize {
        let private: usize = self
            .prefilling
            .iter()
            .chain(self.running.iter())
            .map(|r| r.private())
            .sum();
        self.tree.size() + private
    }

    pub(super) fn kv_available(&self) -> usize {
        self.shared
            .budget
            .kv_pool_tokens
            .saturating_sub(self.kv_used())
    }

    /// Makes room for `need` tokens by evicting cache; true when they fit.
    pub(super) fn reserve(&mut self, need: usize) -> bool {
        let used = self.kv_used();
        let pool = self.shared.budget.kv_pool_tokens;
        if used + need <= pool {
            return true;
        }
        // Evict the whole shortfall: `used` may already exceed the pool when the head-of-line
        // request was let through without room (below), so `pool - used` saturates at zero.
        self.tree.evict(used + need - pool);
        self.kv_available() >= need
    }

    pub(super) fn release(&mut self, r: &mut RequestState) {
        self.tree.unlock(r.node);
        r.node = RadixTree::ROOT;
        r.locked_len = 0;
        r.kv_len = 0;
    }

    /// KV tokens one decode step can add to a request (a verify step's draft plus one).
    pub(super) fn tokens_per_step(&self) -> usize {
        if self.cfg.speculative() {
            self.cfg.speculative_num_draft_tokens + 1
        } else {
            1
        }
    }
}
