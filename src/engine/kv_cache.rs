//! The KV cache as an explicit object the engine controls.
//!
//! Per layer, keys and values live in preallocated buffers of shape
//! `[n_kv_head, capacity, head_dim]`. New positions are written in place
//! (`slice_set`); attention reads a zero-copy view of the first `len` positions. When a
//! write would overflow, the capacity doubles (one copy, amortised O(1) per token). The
//! cache also remembers the token ids it holds, so a prefix store can match prompts
//! against it, and it can be truncated or forked at any length.
//!
//! Where the CPU runs the AVX-512 attention kernels, layers are kept instead in the blocked
//! layouts those kernels read, written as positions are appended so no call re-arranges
//! the cache ([`KvLayout`]): f32 keys in [`KeyBlocks`] (same bytes per position), or, with
//! AVX-512 BF16, keys and values in bf16 in [`KvBlocks16`] (half the bytes). A cache and
//! every cache forked from it or recomputed on the same machine use the same layout, so
//! reuse stays bit-identical either way. The layouts are in [`crate::engine::kv_blocks`];
//! which one a CPU gets is what the attention kernels say they read
//! ([`attention::uses_key_blocks`], [`attention::uses_bf16_blocks`]).

use crate::engine::arch::attention;
use crate::engine::arch::spec::ModelConfig;
pub use crate::engine::kv_blocks::{KeyBlocks, KvBlocks16};
use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor};

/// Initial capacity in positions.
const INITIAL_CAPACITY: usize = 256;

/// How a cache stores keys and values, chosen per device and CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvLayout {
    /// f32 tensors `[n_kv_head, capacity, head_dim]` (GPUs; CPUs without AVX-512).
    Rows,
    /// f32 keys in [`KeyBlocks`], f32 value tensors (AVX-512 CPUs without BF16).
    KeyBlocks,
    /// bf16 keys and values in [`KvBlocks16`] (AVX-512 CPUs with BF16).
    Bf16,
}

impl KvLayout {
    /// The layout a cache for `cfg` on `device` uses.
    pub fn for_device(cfg: &ModelConfig, device: &Device) -> Self {
        if !device.is_cpu() {
            Self::Rows
        } else if attention::uses_bf16_blocks(cfg.head_dim) {
            Self::Bf16
        } else if attention::uses_key_blocks(cfg.head_dim) {
            Self::KeyBlocks
        } else {
            Self::Rows
        }
    }

    /// Element type of the stored keys and values: `"f32"` or `"bf16"`.
    pub fn dtype_name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            _ => "f32",
        }
    }

    /// Bytes per stored key or value element.
    pub fn elem_bytes(self) -> usize {
        match self {
            Self::Bf16 => 2,
            _ => 4,
        }
    }
}

/// One layer's storage.
enum LayerStore {
    Rows { keys: Tensor, values: Tensor },
    KeyBlocks { keys: KeyBlocks, values: Tensor },
    Bf16(KvBlocks16),
}

/// Keys and values of every layer for a sequence of tokens.
pub struct KvCache {
    layers: Vec<LayerStore>,
    layout: KvLayout,
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
        let layout = KvLayout::for_device(cfg, device);
        let (nkv, hd) = (cfg.n_kv_head, cfg.head_dim);
        let zeros = || Tensor::zeros((nkv, capacity, hd), DType::F32, device);
        let layers = (0..cfg.n_layer)
            .map(|_| {
                Ok(match layout {
                    KvLayout::Rows => LayerStore::Rows {
                        keys: zeros()?,
                        values: zeros()?,
                    },
                    KvLayout::KeyBlocks => {
                        let mut keys = KeyBlocks::new(nkv, hd);
                        keys.reserve(capacity);
                        LayerStore::KeyBlocks {
                            keys,
                            values: zeros()?,
                        }
                    }
                    KvLayout::Bf16 => {
                        let mut b = KvBlocks16::new(nkv, hd);
                        b.reserve(capacity);
                        LayerStore::Bf16(b)
                    }
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            layout,
            capacity,
            len: 0,
            pending: 0,
            tokens: Vec::new(),
            n_kv_head: nkv,
            head_dim: hd,
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
        self.layers.len()
    }

    /// How keys and values are stored.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Bytes used per stored position (keys + values, all layers).
    pub fn bytes_per_token(&self) -> usize {
        2 * self.n_layer() * self.n_kv_head * self.head_dim * self.layout.elem_bytes()
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
        let grow = |buf: &mut Tensor| -> Result<()> {
            let bigger = Tensor::zeros(shape, DType::F32, &self.device)?;
            bigger.slice_set(buf, 1, 0)?;
            *buf = bigger;
            Ok(())
        };
        for layer in &mut self.layers {
            match layer {
                LayerStore::Rows { keys, values } => {
                    grow(keys)?;
                    grow(values)?;
                }
                LayerStore::KeyBlocks { values, .. } => grow(values)?,
                // Blocks grow as they are written.
                LayerStore::Bf16(_) => {}
            }
        }
        self.capacity = cap;
        Ok(())
    }

    /// Write keys and values (`[n_kv_head, t, head_dim]`) of `t` new positions for `layer`
    /// after the stored ones. They become visible to [`Self::layer`] at once and part of
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
        self.write(layer, self.len, k, v)
    }

    /// Store `k` and `v` (`[n_kv_head, t, head_dim]`) of `layer` at positions `start..`.
    fn write(&mut self, layer: usize, start: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let t = k.dim(1)?;
        let k = k.to_dtype(DType::F32)?.contiguous()?;
        let v = v.to_dtype(DType::F32)?.contiguous()?;
        let flat = |x: &Tensor| x.flatten_all()?.to_vec1::<f32>();
        match self.layers.get_mut(layer).context("layer out of range")? {
            LayerStore::Rows { keys, values } => {
                keys.slice_set(&k, 1, start)?;
                values.slice_set(&v, 1, start)?;
            }
            LayerStore::KeyBlocks { keys, values } => {
                values.slice_set(&v, 1, start)?;
                keys.write(start, &flat(&k)?, t);
            }
            LayerStore::Bf16(b) => b.write(start, &flat(&k)?, &flat(&v)?, t),
        }
        Ok(())
    }

    /// The keys and values of `layer`; the first `len + pending` positions are valid.
    pub fn layer(&self, layer: usize) -> LayerKv<'_> {
        match &self.layers[layer] {
            LayerStore::Rows { keys, values } => LayerKv::Rows { keys, values },
            LayerStore::KeyBlocks { keys, values } => LayerKv::KeyBlocks { keys, values },
            LayerStore::Bf16(b) => LayerKv::Bf16(b),
        }
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
        let copy = |t: &Tensor| -> Result<Tensor> {
            let c = Tensor::zeros(shape, DType::F32, &self.device)?;
            if len > 0 {
                c.slice_set(&t.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
            }
            Ok(c)
        };
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(match l {
                    LayerStore::Rows { keys, values } => LayerStore::Rows {
                        keys: copy(keys)?,
                        values: copy(values)?,
                    },
                    LayerStore::KeyBlocks { keys, values } => LayerStore::KeyBlocks {
                        keys: keys.prefix(len, capacity),
                        values: copy(values)?,
                    },
                    LayerStore::Bf16(b) => LayerStore::Bf16(b.prefix(len, capacity)),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            layout: self.layout,
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

    /// Copies of the stored keys and values of `layer` (`[n_kv_head, len, head_dim]`, in
    /// the stored element type: f32, or bf16 for [`KvLayout::Bf16`]), for saving.
    pub fn layer_data(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        let (nkv, len, hd) = (self.n_kv_head, self.len, self.head_dim);
        let rows = |t: &Tensor| -> Result<Tensor> { Ok(t.narrow(1, 0, len)?.contiguous()?) };
        let from = |v: Vec<f32>| Tensor::from_vec(v, (nkv, len, hd), &self.device);
        Ok(match &self.layers[layer] {
            LayerStore::Rows { keys, values } => (rows(keys)?, rows(values)?),
            LayerStore::KeyBlocks { keys, values } => (from(keys.rows(len))?, rows(values)?),
            LayerStore::Bf16(b) => {
                let (k, v) = b.rows(len);
                let shape = (nkv, len, hd);
                (
                    Tensor::from_vec(k, shape, &self.device)?,
                    Tensor::from_vec(v, shape, &self.device)?,
                )
            }
        })
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
                cache.write(i, 0, &k.to_device(device)?, &v.to_device(device)?)?;
            }
        }
        cache.len = len;
        cache.tokens = tokens;
        Ok(cache)
    }
}

/// Where one layer's keys and values are.
pub enum LayerKv<'a> {
    /// Keys and values `[n_kv_head, capacity, head_dim]`, f32.
    Rows {
        /// Keys.
        keys: &'a Tensor,
        /// Values.
        values: &'a Tensor,
    },
    /// f32 keys in the AVX-512 kernel's layout; values `[n_kv_head, capacity, head_dim]`.
    KeyBlocks {
        /// Keys.
        keys: &'a KeyBlocks,
        /// Values.
        values: &'a Tensor,
    },
    /// bf16 keys and values in the AVX-512 BF16 kernel's layout.
    Bf16(&'a KvBlocks16),
}
