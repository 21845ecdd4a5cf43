//! The KV cache as an explicit object the engine controls.
//!
//! Per layer, keys and values live in preallocated buffers of shape
//! `[n_kv_head, capacity, head_dim]`. New positions are written in place
//! (`slice_set`); attention reads a zero-copy view of the first `len` positions. When a
//! write would overflow, the capacity doubles (one copy, amortised O(1) per token). The
//! cache also remembers the token ids it holds, so a prefix store can match prompts
//! against it, and it can be truncated or forked at any length.

use crate::engine::arch::ModelConfig;
use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor};

/// Initial capacity in positions.
const INITIAL_CAPACITY: usize = 256;

/// Keys and values of every layer for a sequence of tokens.
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
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
        let mut keys = Vec::with_capacity(cfg.n_layer);
        let mut values = Vec::with_capacity(cfg.n_layer);
        for _ in 0..cfg.n_layer {
            keys.push(Tensor::zeros(shape, DType::F32, device)?);
            values.push(Tensor::zeros(shape, DType::F32, device)?);
        }
        Ok(Self {
            keys,
            values,
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
        self.keys.len()
    }

    /// Bytes used per stored position (keys + values, all layers, f32).
    pub fn bytes_per_token(&self) -> usize {
        2 * self.keys.len() * self.n_kv_head * self.head_dim * 4
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
        self.keys
            .get(layer)
            .context("layer out of range")?
            .slice_set(&k, 1, self.len)?;
        self.values[layer].slice_set(&v, 1, self.len)?;
        Ok(())
    }

    /// The whole key and value buffers of `layer` (`[n_kv_head, capacity, head_dim]`); the
    /// first `len + pending` positions are valid.
    pub fn layer_buffers(&self, layer: usize) -> (&Tensor, &Tensor) {
        (&self.keys[layer], &self.values[layer])
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
        for (k, v) in self.keys.iter().zip(&self.values) {
            let nk = Tensor::zeros(shape, DType::F32, &self.device)?;
            let nv = Tensor::zeros(shape, DType::F32, &self.device)?;
            if len > 0 {
                nk.slice_set(&k.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
                nv.slice_set(&v.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
            }
            keys.push(nk);
            values.push(nv);
        }
        Ok(Self {
            keys,
            values,
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
        Ok((
            self.keys[layer].narrow(1, 0, self.len)?.contiguous()?,
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
                cache.keys[i].slice_set(&k.to_device(device)?.to_dtype(DType::F32)?, 1, 0)?;
                cache.values[i].slice_set(&v.to_device(device)?.to_dtype(DType::F32)?, 1, 0)?;
            }
        }
        cache.len = len;
        cache.tokens = tokens;
        Ok(cache)
    }
}
