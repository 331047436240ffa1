//! An ended request's chunk records, packed: the store keeps thousands of ended requests of
//! hundreds of chunks each, so each chunk is a few bytes of LEB128 varints rather than a 40-byte
//! [`ChunkTruth`]. Packing is exact: [`PackedChunks::unpack`] gives back every field as it was.
//!
//! Per chunk, in order: `tokens << 1 | sent`, where `sent` says whether `sent_ns` is present; the
//! change of `at_ns` from the chunk before (the first from 0); `model_ns - at_ns`; and, when
//! present, `sent_ns - at_ns`. Differences are taken modulo 2^64 and zigzag-coded, so near
//! instants take one to three bytes whatever their order.

use super::ChunkTruth;

/// Chunk records packed into one byte buffer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct PackedChunks {
    bytes: Box<[u8]>,
    len: usize,
}

impl PackedChunks {
    pub(super) fn pack(chunks: &[ChunkTruth]) -> Self {
        let mut out = Vec::with_capacity(chunks.len() * 8);
        let mut prev_at = 0u64;
        for c in chunks {
            put(
                &mut out,
                (c.tokens as u128) << 1 | u128::from(c.sent_ns.is_some()),
            );
            put(&mut out, zigzag(c.at_ns.wrapping_sub(prev_at)).into());
            put(&mut out, zigzag(c.model_ns.wrapping_sub(c.at_ns)).into());
            if let Some(s) = c.sent_ns {
                put(&mut out, zigzag(s.wrapping_sub(c.at_ns)).into());
            }
            prev_at = c.at_ns;
        }
        PackedChunks {
            bytes: out.into_boxed_slice(),
            len: chunks.len(),
        }
    }

    pub(super) fn unpack(&self) -> Vec<ChunkTruth> {
        let mut out = Vec::with_capacity(self.len);
        let mut r = Reader(&self.bytes);
        let mut prev_at = 0u64;
        for _ in 0..self.len {
            let head = r.next();
            let at_ns = prev_at.wrapping_add(unzigzag(r.next() as u64));
            let model_ns = at_ns.wrapping_add(unzigzag(r.next() as u64));
            let sent_ns = (head & 1 == 1).then(|| at_ns.wrapping_add(unzigzag(r.next() as u64)));
            out.push(ChunkTruth {
                at_ns,
                model_ns,
                tokens: (head >> 1) as usize,
                sent_ns,
            });
            prev_at = at_ns;
        }
        out
    }

    /// Bytes the packed records take on the heap.
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }
}

fn zigzag(d: u64) -> u64 {
    let d = d as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

fn put(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads varints [`put`] wrote; the buffer is this module's own, so it is never short.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn next(&mut self) -> u128 {
        let (mut v, mut shift) = (0u128, 0u32);
        while let Some((&b, rest)) = self.0.split_first() {
            self.0 = rest;
            if shift < 128 {
                v |= u128::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk() -> impl Strategy<Value = ChunkTruth> {
        (
            any::<u64>(),
            any::<u64>(),
            any::<usize>(),
            any::<Option<u64>>(),
        )
            .prop_map(|(at_ns, model_ns, tokens, sent_ns)| ChunkTruth {
                at_ns,
                model_ns,
                tokens,
                sent_ns,
            })
    }

    proptest! {
        #[test]
        fn packing_gives_back_every_field(chunks in prop::collection::vec(chunk(), 0..40)) {
            prop_assert_eq!(PackedChunks::pack(&chunks).unpack(), chunks);
        }
    }

    #[test]
    fn a_decode_step_packs_into_a_few_bytes() {
        // 512 one-token chunks 200 us apart, emitted 30 us after their modelled instant.
        let chunks: Vec<ChunkTruth> = (0..512u64)
            .map(|k| ChunkTruth {
                at_ns: 1_000_000 + k * 200_000,
                model_ns: 970_000 + k * 200_000,
                tokens: 1,
                sent_ns: None,
            })
            .collect();
        let p = PackedChunks::pack(&chunks);
        assert_eq!(p.unpack(), chunks);
        assert!(p.heap_bytes() <= 512 * 7, "{} bytes", p.heap_bytes());
    }
}
