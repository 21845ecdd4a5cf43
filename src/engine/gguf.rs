//! Opening and validating a GGUF file: header, metadata, tensor table, and bounds.
//!
//! Candle parses the format; this module adds the checks a user needs when a download was
//! cut short or a file is not a model at all, and turns every failure into an error that
//! names the file and the problem.

use crate::engine::kernels::formats::Format;
use crate::engine::kernels::{QuantMatrix, WeightBytes};
use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use memmap2::Mmap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Tensor types this engine can run (the ones the supported models ship with, and their
/// close relatives that Candle's CPU kernels support).
pub const SUPPORTED_TENSOR_TYPES: &[GgmlDType] = &[
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// An opened, validated GGUF file: its metadata and tensor table (weights are read lazily).
pub struct GgufFile {
    /// Where the file is.
    pub path: PathBuf,
    /// Size in bytes.
    pub file_len: u64,
    /// Parsed header.
    pub content: Content,
    file: File,
    map: Arc<Mmap>,
    /// Whether [`Self::quant_matrix`] hands out matrices for Quire's CPU kernels (true) or
    /// always says `None` so Candle's kernels run (GPUs, comparisons).
    pub native_kernels: bool,
}

impl GgufFile {
    /// Open `path`, parse the header, and check that every tensor lies inside the file and
    /// has a supported type.
    pub fn open(path: &Path) -> Result<Self> {
        let mut file = File::open(path)
            .with_context(|| format!("cannot open model file {}", path.display()))?;
        let file_len = file
            .metadata()
            .with_context(|| format!("cannot stat model file {}", path.display()))?
            .len();
        if file_len < 24 {
            bail!(
                "{}: file is {file_len} bytes, too short to be a GGUF model (truncated download? fetch it again)",
                path.display()
            );
        }
        let mut magic = [0u8; 4];
        std::io::Read::read_exact(&mut file, &mut magic)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if &magic != b"GGUF" {
            bail!(
                "{}: bad magic {:?}, this is not a GGUF file (expected the bytes \"GGUF\" at offset 0)",
                path.display(),
                String::from_utf8_lossy(&magic)
            );
        }
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))?;
        // Buffered: the header holds hundreds of thousands of small strings (vocabulary,
        // merges), which unbuffered would cost one read system call each.
        let content = Content::read(&mut std::io::BufReader::with_capacity(1 << 20, &mut file))
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: corrupt or truncated GGUF header: {e} (fetch the model again)",
                    path.display()
                )
            })?;
        for (name, info) in &content.tensor_infos {
            if !SUPPORTED_TENSOR_TYPES.contains(&info.ggml_dtype) {
                bail!(
                    "{}: tensor {name} has type {:?}, which Quire does not support (supported: {:?})",
                    path.display(),
                    info.ggml_dtype,
                    SUPPORTED_TENSOR_TYPES
                );
            }
            let elems = info.shape.elem_count();
            let block = info.ggml_dtype.block_size();
            if elems % block != 0 {
                bail!(
                    "{}: tensor {name} has {elems} elements, not a multiple of its block size {block}",
                    path.display()
                );
            }
            let bytes = (elems / block * info.ggml_dtype.type_size()) as u64;
            let start = content.tensor_data_offset + info.offset;
            let end = start.saturating_add(bytes);
            if end > file_len {
                bail!(
                    "{}: tensor {name} spans bytes {start}..{end} but the file has only {file_len} bytes (truncated download? fetch the model again)",
                    path.display()
                );
            }
        }
        // SAFETY: the file is opened read-only and models are not rewritten in place (the
        // model store writes a new file and renames it); as in llama.cpp, a file truncated
        // by another process while mapped would fault.
        let map = unsafe { Mmap::map(&file) }
            .with_context(|| format!("cannot memory-map {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            file_len,
            content,
            file,
            map: Arc::new(map),
            native_kernels: true,
        })
    }

    /// A metadata value, or an error naming the missing key.
    pub fn meta(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .with_context(|| format!("{}: metadata key {key} is missing", self.path.display()))
    }

    /// A metadata value if present.
    pub fn meta_opt(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    /// A string metadata value.
    pub fn meta_str(&self, key: &str) -> Result<&str> {
        Ok(self
            .meta(key)?
            .to_string()
            .with_context(|| format!("{}: metadata {key} is not a string", self.path.display()))?
            .as_str())
    }

    /// An integer metadata value (any integer width).
    pub fn meta_usize(&self, key: &str) -> Result<usize> {
        let v = self.meta(key)?;
        let n = match v {
            Value::U8(x) => *x as u64,
            Value::I8(x) => *x as u64,
            Value::U16(x) => *x as u64,
            Value::I16(x) => *x as u64,
            Value::U32(x) => *x as u64,
            Value::I32(x) => *x as u64,
            Value::U64(x) => *x,
            Value::I64(x) => *x as u64,
            _ => bail!("{}: metadata {key} is not an integer", self.path.display()),
        };
        Ok(n as usize)
    }

    /// A float metadata value.
    pub fn meta_f32(&self, key: &str) -> Result<f32> {
        match self.meta(key)? {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            _ => bail!("{}: metadata {key} is not a float", self.path.display()),
        }
    }

    /// The `general.architecture` string.
    pub fn architecture(&self) -> Result<&str> {
        self.meta_str("general.architecture")
    }

    /// Whether the file contains a tensor called `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Read one tensor onto `device`.
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        self.content
            .tensor(&mut self.file, name, device)
            .with_context(|| format!("{}: cannot read tensor {name}", self.path.display()))
    }

    /// Tensor `name` as a memory-mapped [`QuantMatrix`] (`rows` = outputs), or `None` when
    /// its type has no native CPU kernel (then Candle's kernels run it).
    pub fn quant_matrix(&self, name: &str) -> Result<Option<QuantMatrix>> {
        let info = self
            .content
            .tensor_infos
            .get(name)
            .with_context(|| format!("{}: no tensor named {name}", self.path.display()))?;
        let Some(format) = Format::from_ggml(info.ggml_dtype).filter(|_| self.native_kernels)
        else {
            return Ok(None);
        };
        let dims = info.shape.dims();
        let (rows, cols) = match dims {
            [n, k] => (*n, *k),
            _ => return Ok(None),
        };
        let start = (self.content.tensor_data_offset + info.offset) as usize;
        let len = rows * format.row_bytes(cols);
        let m = QuantMatrix::new(
            format,
            rows,
            cols,
            WeightBytes::Mapped(self.map.clone(), start..start + len),
        )
        .with_context(|| format!("{}: tensor {name}", self.path.display()))?;
        Ok(Some(m))
    }

    /// Total number of parameters (elements over all tensors).
    pub fn parameter_count(&self) -> usize {
        self.content
            .tensor_infos
            .values()
            .map(|t| t.shape.elem_count())
            .sum()
    }

    /// Count of tensors per type, sorted by type name.
    pub fn tensor_type_counts(&self) -> Vec<(String, usize)> {
        let mut map = std::collections::BTreeMap::new();
        for info in self.content.tensor_infos.values() {
            *map.entry(format!("{:?}", info.ggml_dtype))
                .or_insert(0usize) += 1;
        }
        map.into_iter().collect()
    }
}
