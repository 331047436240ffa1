//! The GPU memory budget: weights and KV pool from `mem_fraction_static`, free headroom for
//! activations, and the activation peak of a prefill pass (with allocator fragmentation).

use crate::config::Config;

/// Memory figures for one GPU, derived from a [`Config`].
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryBudget {
    pub total_bytes: u64,
    pub static_bytes: u64,
    pub weights_bytes: u64,
    /// Tokens the KV pool holds ([`Config::kv_pool_tokens`]).
    pub kv_pool_tokens: usize,
    /// Free headroom for activations: total x (1 - mem_fraction_static) - overhead (never negative).
    pub free_headroom_bytes: u64,
    extend: f64,
    context: f64,
    fragmentation: f64,
}

impl MemoryBudget {
    pub fn new(c: &Config) -> Self {
        let total = c.gpu_total_bytes as f64;
        let static_bytes = c.static_bytes();
        let headroom = (total - static_bytes - c.overhead_bytes as f64).max(0.0);
        MemoryBudget {
            total_bytes: c.gpu_total_bytes,
            static_bytes: static_bytes as u64,
            weights_bytes: c.weights_bytes,
            kv_pool_tokens: c.kv_pool_tokens(),
            free_headroom_bytes: headroom as u64,
            extend: c.activation_bytes_per_extend_token,
            context: c.activation_bytes_per_context_token,
            fragmentation: if c.expandable_segments {
                0.0
            } else {
                c.fragmentation_bytes_per_context_token
            },
        }
    }

    /// Activation peak of a prefill pass that extends `extend_tokens` tokens while attending over
    /// `context_end` tokens (context before the chunk plus the chunk), fragmentation included.
    pub fn activation_peak(&self, extend_tokens: usize, context_end: usize) -> u64 {
        let peak = self.extend * extend_tokens as f64
            + (self.context + self.fragmentation) * context_end as f64;
        peak.max(0.0).round() as u64
    }

    /// Whether a peak exceeds the free headroom (the CUDA out-of-memory condition).
    pub fn is_oom(&self, peak_bytes: u64) -> bool {
        peak_bytes > self.free_headroom_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIMI: &str = "kimi-k2.6-dflash-8xrtx-pro-6000";

    #[test]
    fn kimi_headroom_matches_the_story() {
        let c = Config::preset(KIMI).unwrap();
        let b = MemoryBudget::new(&c);
        let mb = b.free_headroom_bytes as f64 / 1e6;
        assert!((mb - 893.0).abs() < 1.0, "headroom {mb} MB");
        // 32k prompt, last 8192-chunk pass: 7424 tokens extending to 32,000 context.
        let peak = b.activation_peak(32_000 - 3 * 8192, 32_000) as f64 / 1e6;
        assert!((peak - 896.0).abs() < 1.0, "peak {peak} MB");
        assert!(b.is_oom(b.activation_peak(32_000 - 3 * 8192, 32_000)));
        assert!(!b.is_oom(b.activation_peak(8192, 16_384)));
        assert!(b.kv_pool_tokens > 200_000);
    }

    #[test]
    fn kimi_fixed_config_survives_185k() {
        let mut c = Config::preset(KIMI).unwrap();
        c.set("mem_fraction_static", "0.93").unwrap();
        c.set("chunked_prefill_size", "4096").unwrap();
        c.set("expandable_segments", "true").unwrap();
        let b = MemoryBudget::new(&c);
        assert!(!b.is_oom(b.activation_peak(4096, 185_000)));
        assert!(b.kv_pool_tokens > 185_000 + 1024);
    }
}
