//! The blocked layouts the AVX-512 attention kernels read a layer's keys and values in
//! ([`KeyBlocks`]: f32 keys; [`KvBlocks16`]: bf16 keys and values), written position by
//! position as a sequence grows. Plain storage: the KV cache keeps a layer in one of them
//! (see `kv_cache::KvLayout`) and the attention kernels read them; this file imports
//! neither.

/// One layer's keys in blocks of [`KeyBlocks::WIDTH`] positions, transposed within a block:
/// `[block][kv_head][head_dim][WIDTH]`. Component `d` of one head's keys for 16 consecutive
/// positions is contiguous, so the attention kernel scores 16 positions with one 512-bit
/// load per component. Blocks are outermost, so the buffer grows without re-arranging.
/// Lanes past the stored length hold stale or zero values; the kernel masks them.
#[derive(Clone)]
pub struct KeyBlocks {
    data: Vec<f32>,
    n_kv_head: usize,
    head_dim: usize,
}

impl KeyBlocks {
    /// Positions per block (one 512-bit register of f32).
    pub const WIDTH: usize = 16;

    /// No positions yet.
    pub fn new(n_kv_head: usize, head_dim: usize) -> Self {
        Self {
            data: Vec::new(),
            n_kv_head,
            head_dim,
        }
    }

    /// Floats per block (all heads).
    fn block_len(&self) -> usize {
        self.n_kv_head * self.head_dim * Self::WIDTH
    }

    /// Store `t` positions' keys (`[n_kv_head][t][head_dim]`) at positions `start..start + t`.
    pub fn write(&mut self, start: usize, keys: &[f32], t: usize) {
        let (nkv, hd, w) = (self.n_kv_head, self.head_dim, Self::WIDTH);
        debug_assert_eq!(keys.len(), nkv * t * hd);
        let needed = (start + t).div_ceil(w) * self.block_len();
        if self.data.len() < needed {
            self.data.resize(needed, 0.0);
        }
        for g in 0..nkv {
            for p in 0..t {
                let pos = start + p;
                let base = ((pos / w * nkv + g) * hd) * w + pos % w;
                let row = &keys[(g * t + p) * hd..(g * t + p + 1) * hd];
                for (d, &x) in row.iter().enumerate() {
                    self.data[base + d * w] = x;
                }
            }
        }
    }

    /// Make room for `positions` without reallocating.
    pub fn reserve(&mut self, positions: usize) {
        let want = positions.div_ceil(Self::WIDTH) * self.block_len();
        self.data.reserve(want.saturating_sub(self.data.len()));
    }

    /// The first `len` positions back in row layout, `[n_kv_head][len][head_dim]`.
    pub fn rows(&self, len: usize) -> Vec<f32> {
        let (nkv, hd, w) = (self.n_kv_head, self.head_dim, Self::WIDTH);
        let mut out = vec![0f32; nkv * len * hd];
        for g in 0..nkv {
            for pos in 0..len {
                let base = ((pos / w * nkv + g) * hd) * w + pos % w;
                for d in 0..hd {
                    out[(g * len + pos) * hd + d] = self.data[base + d * w];
                }
            }
        }
        out
    }

    /// A copy holding the blocks of the first `len` positions, with room for `room`.
    pub fn prefix(&self, len: usize, room: usize) -> Self {
        let n = (len.div_ceil(Self::WIDTH) * self.block_len()).min(self.data.len());
        let mut data = Vec::with_capacity(n.max(room.div_ceil(Self::WIDTH) * self.block_len()));
        data.extend_from_slice(&self.data[..n]);
        Self {
            data,
            n_kv_head: self.n_kv_head,
            head_dim: self.head_dim,
        }
    }

    /// The blocks as one slice (`[block][kv_head][head_dim][WIDTH]`).
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    /// Key/value heads.
    pub fn n_kv_head(&self) -> usize {
        self.n_kv_head
    }
}

/// One layer's keys and values in bf16, in the blocks the AVX-512 BF16 attention kernel
/// reads (16 positions per block, blocks outermost so the buffers grow without
/// re-arranging):
/// - keys `[block][kv_head][head_dim / 2][16][2]`: a pair of components of 16 positions is
///   one 512-bit register, as `vdpbf16ps` multiplies them with a pair of query components;
/// - values `[block][kv_head][8][head_dim][2]`: a pair of positions' values interleaved per
///   component, as `vdpbf16ps` weighs them with a pair of probabilities.
///
/// Slots past the stored length hold zeros or stale finite values (their probability is 0).
#[derive(Clone)]
pub struct KvBlocks16 {
    keys: Vec<u16>,
    values: Vec<u16>,
    n_kv_head: usize,
    head_dim: usize,
}

impl KvBlocks16 {
    /// Positions per block.
    pub const WIDTH: usize = 16;

    /// No positions yet.
    pub fn new(n_kv_head: usize, head_dim: usize) -> Self {
        Self {
            keys: Vec::new(),
            values: Vec::new(),
            n_kv_head,
            head_dim,
        }
    }

    /// Values per block (all heads), keys or values.
    fn block_len(&self) -> usize {
        self.n_kv_head * self.head_dim * Self::WIDTH
    }

    fn key_index(&self, pos: usize, g: usize, d: usize) -> usize {
        let (w, hd) = (Self::WIDTH, self.head_dim);
        ((pos / w * self.n_kv_head + g) * (hd / 2) + d / 2) * 2 * w + (pos % w) * 2 + d % 2
    }

    fn value_index(&self, pos: usize, g: usize, d: usize) -> usize {
        let (w, hd) = (Self::WIDTH, self.head_dim);
        ((pos / w * self.n_kv_head + g) * (w / 2) + (pos % w) / 2) * 2 * hd + d * 2 + pos % 2
    }

    /// Store `t` positions' keys and values (each `[n_kv_head][t][head_dim]`, f32, rounded
    /// to the nearest bf16) at positions `start..start + t`.
    pub fn write(&mut self, start: usize, keys: &[f32], values: &[f32], t: usize) {
        let (nkv, hd) = (self.n_kv_head, self.head_dim);
        debug_assert_eq!(keys.len(), nkv * t * hd);
        debug_assert_eq!(values.len(), nkv * t * hd);
        let needed = (start + t).div_ceil(Self::WIDTH) * self.block_len();
        if self.keys.len() < needed {
            self.keys.resize(needed, 0);
            self.values.resize(needed, 0);
        }
        let bf = |x: f32| half::bf16::from_f32(x).to_bits();
        for g in 0..nkv {
            for p in 0..t {
                let row = (g * t + p) * hd;
                let (k, v) = (&keys[row..row + hd], &values[row..row + hd]);
                let kb = self.key_index(start + p, g, 0);
                for (e, pair) in k.chunks_exact(2).enumerate() {
                    self.keys[kb + e * 2 * Self::WIDTH] = bf(pair[0]);
                    self.keys[kb + e * 2 * Self::WIDTH + 1] = bf(pair[1]);
                }
                let vb = self.value_index(start + p, g, 0);
                for (d, &x) in v.iter().enumerate() {
                    self.values[vb + d * 2] = bf(x);
                }
            }
        }
    }

    /// Make room for `positions` without reallocating.
    pub fn reserve(&mut self, positions: usize) {
        let want = positions.div_ceil(Self::WIDTH) * self.block_len();
        self.keys.reserve(want.saturating_sub(self.keys.len()));
        self.values.reserve(want.saturating_sub(self.values.len()));
    }

    /// The first `len` positions' keys and values in row layout, `[n_kv_head][len][head_dim]`
    /// each.
    pub fn rows(&self, len: usize) -> (Vec<half::bf16>, Vec<half::bf16>) {
        let (nkv, hd) = (self.n_kv_head, self.head_dim);
        let mut k = vec![half::bf16::ZERO; nkv * len * hd];
        let mut v = vec![half::bf16::ZERO; nkv * len * hd];
        for g in 0..nkv {
            for pos in 0..len {
                let (kb, vb) = (self.key_index(pos, g, 0), self.value_index(pos, g, 0));
                let o = (g * len + pos) * hd;
                for d in 0..hd {
                    let ki = kb + (d / 2) * 2 * Self::WIDTH + d % 2;
                    k[o + d] = half::bf16::from_bits(self.keys[ki]);
                    v[o + d] = half::bf16::from_bits(self.values[vb + d * 2]);
                }
            }
        }
        (k, v)
    }

    /// A copy holding the blocks of the first `len` positions, with room for `room`.
    pub fn prefix(&self, len: usize, room: usize) -> Self {
        let n = (len.div_ceil(Self::WIDTH) * self.block_len()).min(self.keys.len());
        let cap = n.max(room.div_ceil(Self::WIDTH) * self.block_len());
        let copy = |src: &[u16]| {
            let mut v = Vec::with_capacity(cap);
            v.extend_from_slice(&src[..n]);
            v
        };
        Self {
            keys: copy(&self.keys),
            values: copy(&self.values),
            n_kv_head: self.n_kv_head,
            head_dim: self.head_dim,
        }
    }

    /// Key blocks (`[block][kv_head][head_dim / 2][16][2]`, bf16 bits).
    pub fn keys(&self) -> &[u16] {
        &self.keys
    }

    /// Value blocks (`[block][kv_head][8][head_dim][2]`, bf16 bits).
    pub fn values(&self) -> &[u16] {
        &self.values
    }

    /// Key/value heads.
    pub fn n_kv_head(&self) -> usize {
        self.n_kv_head
    }
}

#[cfg(test)]
mod tests {
    use super::{KeyBlocks, KvBlocks16};

    #[test]
    fn bf16_blocks_round_trip_and_prefix() {
        let (nkv, hd) = (3, 8);
        let total = 37;
        // Small integers are exact in bf16.
        let key = |g: usize, p: usize, d: usize| (g * 64 + p + d) as f32;
        let value = |g: usize, p: usize, d: usize| -((g * 64 + p * 2 + d) as f32);
        let mut blocks = KvBlocks16::new(nkv, hd);
        for (start, t) in [(0, 5), (5, 1), (6, 31)] {
            let (mut k, mut v) = (Vec::new(), Vec::new());
            for g in 0..nkv {
                for p in start..start + t {
                    k.extend((0..hd).map(|d| key(g, p, d)));
                    v.extend((0..hd).map(|d| value(g, p, d)));
                }
            }
            blocks.write(start, &k, &v, t);
        }
        let (k, v) = blocks.rows(total);
        for g in 0..nkv {
            for p in 0..total {
                for d in 0..hd {
                    let o = (g * total + p) * hd + d;
                    assert_eq!(k[o].to_f32(), key(g, p, d));
                    assert_eq!(v[o].to_f32(), value(g, p, d));
                }
            }
        }
        // Keys: components 2e and 2e + 1 of one position are adjacent, 16 positions per
        // run; values: two positions' component d are adjacent.
        let bits = |x: f32| half::bf16::from_f32(x).to_bits();
        let w = KvBlocks16::WIDTH;
        // Block 1, head 2, component pair 1 (dims 2, 3), position 16 + 3.
        let ki = ((nkv + 2) * (hd / 2) + 1) * 2 * w + 3 * 2;
        assert_eq!(blocks.keys()[ki], bits(key(2, 19, 2)));
        assert_eq!(blocks.keys()[ki + 1], bits(key(2, 19, 3)));
        // Block 0, head 1, position pair (4, 5), component 6.
        let (block, head, pair) = (0, 1, 2);
        let vi = ((block * nkv + head) * (w / 2) + pair) * 2 * hd + 6 * 2;
        assert_eq!(blocks.values()[vi], bits(value(1, 4, 6)));
        assert_eq!(blocks.values()[vi + 1], bits(value(1, 5, 6)));
        let short = blocks.prefix(20, 64);
        assert_eq!(short.rows(20), blocks.rows(20));
        assert_eq!(short.keys().len(), 2 * nkv * hd * w);
    }

    #[test]
    fn key_blocks_round_trip_and_prefix() {
        let (nkv, hd) = (3, 8);
        let total = 37;
        // Position p, head g, component d holds a distinct value.
        let value = |g: usize, p: usize, d: usize| (g * 10_000 + p * 100 + d) as f32;
        let mut blocks = KeyBlocks::new(nkv, hd);
        blocks.reserve(20);
        for (start, t) in [(0, 5), (5, 1), (6, 31)] {
            let mut part = Vec::new();
            for g in 0..nkv {
                for p in start..start + t {
                    part.extend((0..hd).map(|d| value(g, p, d)));
                }
            }
            blocks.write(start, &part, t);
        }
        let rows = blocks.rows(total);
        for g in 0..nkv {
            for p in 0..total {
                for d in 0..hd {
                    assert_eq!(rows[(g * total + p) * hd + d], value(g, p, d));
                }
            }
        }
        // Component d of positions 16..32 of head 1 is one contiguous run.
        let w = KeyBlocks::WIDTH;
        let run = &blocks.data()[((nkv + 1) * hd + 2) * w..][..w];
        assert_eq!(
            run,
            &(16..32).map(|p| value(1, p, 2)).collect::<Vec<_>>()[..]
        );
        let short = blocks.prefix(20, 64);
        assert_eq!(short.rows(20), blocks.rows(20));
        assert_eq!(short.data().len(), 2 * nkv * hd * w);
    }
}
