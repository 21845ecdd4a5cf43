//! The KV cache as an explicit object the engine controls.
//!
//! Per layer, keys and values live in preallocated buffers of shape
//! `[n_kv_head, capacity, head_dim]`. New positions are written in place
//! (`slice_set`); attention reads a zero-copy view of the first `len` positions. When a
//! write would overflow, the capacity doubles (one copy, amortised O(1) per token). The
//! cache also remembers the token ids it holds, so a prefix store can match prompts
//! against it, and it can be truncated or forked at any length.
//!
//! Where the CPU runs the AVX-512 attention kernel, each layer's keys are kept instead in
//! [`KeyBlocks`], the blocked, transposed layout that kernel reads (written as positions
//! are appended, so no call re-arranges the cache; same bytes per position).

use crate::engine::arch::{attention, ModelConfig};
use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor};

/// Initial capacity in positions.
const INITIAL_CAPACITY: usize = 256;

/// Keys and values of every layer for a sequence of tokens.
pub struct KvCache {
    /// Keys per layer, `[n_kv_head, capacity, head_dim]`; empty where `key_blocks` holds them.
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    /// Keys per layer in the AVX-512 attention kernel's layout; empty where `keys` holds them.
    key_blocks: Vec<KeyBlocks>,
    capacity: usize,
    len: usize,
    pending: usize,
    tokens: Vec<u32>,
    n_kv_head: usize,
    head_dim: usize,
    max_len: usize,
    device: Device,
}

impl KvCache {
    /// An empty cache for a model with configuration `cfg` on `device`.
    pub fn new(cfg: &ModelConfig, device: &Device) -> Result<Self> {
        Self::with_capacity(cfg, device, INITIAL_CAPACITY)
    }

    /// An empty cache with room for `capacity` positions before it grows.
    pub fn with_capacity(cfg: &ModelConfig, device: &Device, capacity: usize) -> Result<Self> {
        let capacity = capacity.max(1);
        let shape = (cfg.n_kv_head, capacity, cfg.head_dim);
        let blocked = device.is_cpu() && attention::uses_key_blocks(cfg.head_dim);
        let mut keys = Vec::with_capacity(cfg.n_layer);
        let mut values = Vec::with_capacity(cfg.n_layer);
        let mut key_blocks = Vec::new();
        for _ in 0..cfg.n_layer {
            if blocked {
                let mut b = KeyBlocks::new(cfg.n_kv_head, cfg.head_dim);
                b.reserve(capacity);
                key_blocks.push(b);
            } else {
                keys.push(Tensor::zeros(shape, DType::F32, device)?);
            }
            values.push(Tensor::zeros(shape, DType::F32, device)?);
        }
        Ok(Self {
            keys,
            values,
            key_blocks,
            capacity,
            len: 0,
            pending: 0,
            tokens: Vec::new(),
            n_kv_head: cfg.n_kv_head,
            head_dim: cfg.head_dim,
            max_len: cfg.context_length,
            device: device.clone(),
        })
    }

    /// Number of positions stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The token ids whose keys and values are stored, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Positions that fit before the buffers must grow.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of layers.
    pub fn n_layer(&self) -> usize {
        self.values.len()
    }

    /// Bytes used per stored position (keys + values, all layers, f32).
    pub fn bytes_per_token(&self) -> usize {
        2 * self.n_layer() * self.n_kv_head * self.head_dim * 4
    }

    /// Bytes allocated (capacity, not length).
    pub fn allocated_bytes(&self) -> usize {
        self.capacity * self.bytes_per_token()
    }

    /// Device of the buffers.
    pub fn device(&self) -> &Device {
        &self.device
    }

    fn grow_to(&mut self, needed: usize) -> Result<()> {
        if needed <= self.capacity {
            return Ok(());
        }
        let mut cap = self.capacity;
        while cap < needed {
            cap *= 2;
        }
        let shape = (self.n_kv_head, cap, self.head_dim);
        for buf in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let bigger = Tensor::zeros(shape, DType::F32, &self.device)?;
            bigger.slice_set(buf, 1, 0)?;
            *buf = bigger;
        }
        self.capacity = cap;
        Ok(())
    }

    /// Write keys and values (`[n_kv_head, t, head_dim]`) of `t` new positions for `layer`
    /// after the stored ones. They become visible to [`Self::layer_buffers`] at once and part of
    /// the cache at [`Self::commit`].
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let t = k.dim(1)?;
        ensure!(
            self.len + t <= self.max_len,
            "prompt too long: {} positions exceed the model's context length {}",
            self.len + t,
            self.max_len
        );
        self.grow_to(self.len + t)?;
        self.pending = t;
        let k = k.contiguous()?;
        let v = v.contiguous()?;
        self.values
            .get(layer)
            .context("layer out of range")?
            .slice_set(&v, 1, self.len)?;
        match self.key_blocks.get_mut(layer) {
            Some(blocks) => blocks.write(self.len, &k.flatten_all()?.to_vec1::<f32>()?, t),
            None => self.keys[layer].slice_set(&k, 1, self.len)?,
        }
        Ok(())
    }

    /// The keys of `layer`; the first `len + pending` positions are valid.
    pub fn layer_keys(&self, layer: usize) -> LayerKeys<'_> {
        match self.key_blocks.get(layer) {
            Some(b) => LayerKeys::Blocks(b),
            None => LayerKeys::Rows(&self.keys[layer]),
        }
    }

    /// The whole value buffer of `layer` (`[n_kv_head, capacity, head_dim]`); the first
    /// `len + pending` positions are valid.
    pub fn layer_values(&self, layer: usize) -> &Tensor {
        &self.values[layer]
    }

    /// Make the pending positions (written for every layer) part of the cache.
    pub fn commit(&mut self, tokens: &[u32]) -> Result<()> {
        ensure!(
            tokens.len() == self.pending,
            "commit of {} tokens but {} positions are pending",
            tokens.len(),
            self.pending
        );
        self.len += self.pending;
        self.pending = 0;
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// Forget every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        self.len = len;
        self.pending = 0;
        self.tokens.truncate(len);
    }

    /// A new cache holding a copy of the first `len` positions (capacity with headroom for
    /// `extra` more).
    pub fn fork(&self, len: usize, extra: usize) -> Result<Self> {
        let len = len.min(self.len);
        let capacity = (len + extra).max(INITIAL_CAPACITY);
        let shape = (self.n_kv_head, capacity, self.head_dim);
        let mut keys = Vec::with_capacity(self.keys.len());
        let mut values = Vec::with_capacity(self.values.len());
        for (src, dst) in [(&self.keys, &mut keys), (&self.values, &mut values)] {
            for t in src {
                let copy = Tensor::zeros(shape, DType::F32, &self.device)?;
                if len > 0 {
                    copy.slice_set(&t.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
                }
                dst.push(copy);
            }
        }
        let key_blocks = self
            .key_blocks
            .iter()
            .map(|b| b.prefix(len, capacity))
            .collect();
        Ok(Self {
            keys,
            values,
            key_blocks,
            capacity,
            len,
            pending: 0,
            tokens: self.tokens[..len].to_vec(),
            n_kv_head: self.n_kv_head,
            head_dim: self.head_dim,
            max_len: self.max_len,
            device: self.device.clone(),
        })
    }

    /// Contiguous copies of the stored keys and values of `layer` (`[n_kv_head, len, head_dim]`),
    /// for saving.
    pub fn layer_data(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        let keys = match self.layer_keys(layer) {
            LayerKeys::Rows(k) => k.narrow(1, 0, self.len)?.contiguous()?,
            LayerKeys::Blocks(b) => Tensor::from_vec(
                b.rows(self.len),
                (self.n_kv_head, self.len, self.head_dim),
                &self.device,
            )?,
        };
        Ok((
            keys,
            self.values[layer].narrow(1, 0, self.len)?.contiguous()?,
        ))
    }

    /// Build a cache from saved per-layer keys and values and the tokens they encode.
    pub fn from_layers(
        cfg: &ModelConfig,
        device: &Device,
        layers: Vec<(Tensor, Tensor)>,
        tokens: Vec<u32>,
        extra: usize,
    ) -> Result<Self> {
        ensure!(
            layers.len() == cfg.n_layer,
            "expected {} layers, got {}",
            cfg.n_layer,
            layers.len()
        );
        let len = tokens.len();
        let mut cache = Self::with_capacity(cfg, device, (len + extra).max(INITIAL_CAPACITY))?;
        for (i, (k, v)) in layers.into_iter().enumerate() {
            ensure!(
                k.dims() == [cfg.n_kv_head, len, cfg.head_dim] && v.dims() == k.dims(),
                "layer {i}: saved shape {:?} does not match the model",
                k.dims()
            );
            if len > 0 {
                let k = k.to_device(device)?.to_dtype(DType::F32)?.contiguous()?;
                cache.values[i].slice_set(&v.to_device(device)?.to_dtype(DType::F32)?, 1, 0)?;
                match cache.key_blocks.get_mut(i) {
                    Some(blocks) => blocks.write(0, &k.flatten_all()?.to_vec1::<f32>()?, len),
                    None => cache.keys[i].slice_set(&k, 1, 0)?,
                }
            }
        }
        cache.len = len;
        cache.tokens = tokens;
        Ok(cache)
    }
}

/// Where one layer's keys are.
pub enum LayerKeys<'a> {
    /// `[n_kv_head, capacity, head_dim]`.
    Rows(&'a Tensor),
    /// The AVX-512 attention kernel's layout.
    Blocks(&'a KeyBlocks),
}

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

#[cfg(test)]
mod tests {
    use super::KeyBlocks;

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
