//! `quire inspect [MODEL] [--json]`: what a GGUF model is, without running it, and whether
//! Quire can run it.
//!
//! Every part is read on its own: a model whose architecture or tokenizer Quire does not
//! support is still described as far as its metadata allows, then refused with the lists
//! of what is supported (exit status 1).

use crate::engine::arch::{Model, ModelConfig};
use crate::engine::chat_template::ChatTemplate;
use crate::engine::gguf::GgufFile;
use crate::engine::tokenizer::{self, Tokenizer};
use anyhow::Result;
use serde_json::json;

/// Arguments of `quire inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// A .gguf path, a known model name, or a Hugging Face repo id (default model if omitted).
    pub model: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// The tokenizers Quire builds from GGUF metadata, in words.
fn supported_tokenizers() -> String {
    format!(
        "\"gpt2\" byte-level BPE with pre-tokenizer {}; \"llama\" SentencePiece BPE",
        tokenizer::SUPPORTED_PRE.join(", ")
    )
}

/// Run `quire inspect`: 0 when Quire supports the model, 1 when it does not (what it is is
/// printed all the same).
pub fn run(args: InspectArgs) -> Result<i32> {
    let path = crate::model_store::resolve_model(
        &super::store_config(),
        args.model.as_deref(),
        true,
        args.json,
    )?;
    let gguf = GgufFile::open(&path)?;
    let arch = gguf.architecture().unwrap_or("").to_string();
    let arch_supported = Model::SUPPORTED.contains(&arch.as_str());
    let cfg = ModelConfig::from_gguf(&gguf);
    let declared = json!({
        "model": gguf.meta_str("tokenizer.ggml.model").ok(),
        "pre": gguf.meta_str("tokenizer.ggml.pre").ok(),
    });
    let tok = Tokenizer::for_model(&gguf);
    let template = ChatTemplate::from_gguf(&gguf);

    let mut problems = Vec::new();
    if !arch_supported {
        problems.push(format!("architecture {arch:?} is not supported"));
    }
    if let (true, Err(e)) = (arch_supported, &cfg) {
        problems.push(format!("configuration: {e:#}"));
    }
    if let Err(e) = &tok {
        problems.push(format!("tokenizer: {e:#}"));
    }
    let supported = problems.is_empty();

    let kv = cfg.as_ref().ok().map(|c| {
        (
            c,
            crate::engine::kv_cache::KvLayout::for_device(c, &candle_core::Device::Cpu),
        )
    });
    let info = json!({
        "path": path.display().to_string(),
        "file_bytes": gguf.file_len,
        "name": gguf.meta_str("general.name").unwrap_or(""),
        "architecture": arch,
        "supported": supported,
        "problems": problems,
        "supported_architectures": Model::SUPPORTED,
        "supported_tokenizers": supported_tokenizers(),
        "parameters": gguf.parameter_count(),
        "tensor_types": gguf.tensor_type_counts().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "config": match &cfg { Ok(c) => json!(c), Err(e) => json!({"error": format!("{e:#}")}) },
        "kv_bytes_per_token": kv.as_ref().map(|(c, kv)| c.kv_bytes_per_token(kv.elem_bytes())),
        "kv_dtype": kv.as_ref().map(|(_, kv)| kv.dtype_name()),
        "tokenizer": match &tok {
            Ok(t) => json!({
                "type": t.kind,
                "description": t.kind.to_string(),
                "source": t.source,
                "vocab_size": t.vocab_size(),
                "bos": t.bos_token, "bos_id": t.bos_id, "add_bos": t.add_bos,
                "eos": t.eos_token, "eos_ids": t.eos_ids,
            }),
            Err(e) => json!({"declared": declared, "error": format!("{e:#}")}),
        },
        "chat_template": match &template {
            Ok(t) => json!({"origin": t.origin, "source": t.source}),
            Err(e) => json!({"error": format!("{e:#}")}),
        },
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        println!("path           {}", path.display());
        println!("name           {}", info["name"].as_str().unwrap_or(""));
        println!(
            "architecture   {arch} ({})",
            if arch_supported {
                "supported"
            } else {
                "not supported"
            }
        );
        println!(
            "parameters     {:.1} M",
            gguf.parameter_count() as f64 / 1e6
        );
        println!("file size      {:.1} MB", gguf.file_len as f64 / 1e6);
        let types: Vec<String> = gguf
            .tensor_type_counts()
            .iter()
            .map(|(t, n)| format!("{t}×{n}"))
            .collect();
        println!("tensor types   {}", types.join(", "));
        match &kv {
            Some((cfg, kv)) => {
                println!(
                    "layers {} | hidden {} | heads {} (kv {}) | head dim {} | ffn {} | vocab {}",
                    cfg.n_layer,
                    cfg.hidden,
                    cfg.n_head,
                    cfg.n_kv_head,
                    cfg.head_dim,
                    cfg.ffn,
                    cfg.vocab_size
                );
                println!(
                    "context        {} tokens (KV cache {} KB/token in {} on this CPU)",
                    cfg.context_length,
                    cfg.kv_bytes_per_token(kv.elem_bytes()) / 1024,
                    kv.dtype_name()
                );
                println!("rope θ / eps   {} / {:e}", cfg.rope_theta, cfg.rms_eps);
            }
            None => {
                if let Err(e) = &cfg {
                    println!("config         cannot be read: {e:#}");
                }
            }
        }
        match &tok {
            Ok(t) => {
                println!("tokenizer      {} (supported)", t.kind);
                println!(
                    "               {} tokens; bos {:?} (added: {}), eos {:?}",
                    t.vocab_size(),
                    t.bos_token,
                    t.add_bos,
                    t.eos_ids
                );
            }
            Err(_) => println!(
                "tokenizer      model {}, pre {} (not supported)",
                declared["model"].as_str().unwrap_or("(none)"),
                declared["pre"].as_str().unwrap_or("(none)")
            ),
        }
        match &template {
            Ok(t) => println!("chat template  {} ({} bytes)", t.origin, t.source.len()),
            Err(e) => println!("chat template  none: {e:#}"),
        }
    }
    if supported {
        return Ok(0);
    }
    eprintln!(
        "{}: Quire cannot run this model:\n  - {}\nSupported architectures: {}.\nSupported tokenizers: {}.",
        path.display(),
        problems.join("\n  - "),
        Model::SUPPORTED.join(", "),
        supported_tokenizers()
    );
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::gguf_file::{self, Value};
    use candle_core::quantized::QTensor;

    /// A one-tensor GGUF with the given architecture and tokenizer model.
    fn write(dir: &std::path::Path, arch: &str, tokenizer_model: &str, pre: &str) -> String {
        let path = dir.join(format!("{arch}-{tokenizer_model}-{pre}.gguf"));
        let tokens = Value::Array(
            ["a", "b", "ab"]
                .iter()
                .map(|t| Value::String(t.to_string()))
                .collect(),
        );
        let merges = Value::Array(vec![Value::String("a b".into())]);
        let meta: Vec<(String, Value)> = vec![
            ("general.architecture".into(), Value::String(arch.into())),
            (format!("{arch}.block_count"), Value::U32(1)),
            (format!("{arch}.embedding_length"), Value::U32(4)),
            (
                "tokenizer.ggml.model".into(),
                Value::String(tokenizer_model.into()),
            ),
            ("tokenizer.ggml.pre".into(), Value::String(pre.into())),
            ("tokenizer.ggml.tokens".into(), tokens),
            ("tokenizer.ggml.merges".into(), merges),
        ];
        let embd = QTensor::quantize(
            &candle_core::Tensor::zeros((3, 4), candle_core::DType::F32, &candle_core::Device::Cpu)
                .unwrap(),
            candle_core::quantized::GgmlDType::F32,
        )
        .unwrap();
        let mut f = std::fs::File::create(&path).unwrap();
        let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
        gguf_file::write(&mut f, &meta_refs, &[("token_embd.weight", &embd)]).unwrap();
        path.display().to_string()
    }

    fn inspect(path: String) -> i32 {
        run(InspectArgs {
            model: Some(path),
            json: true,
        })
        .unwrap()
    }

    #[test]
    fn unsupported_architecture_or_tokenizer_is_refused_without_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(inspect(write(dir.path(), "mamba", "gpt2", "qwen2")), 1);
        assert_eq!(inspect(write(dir.path(), "llama", "bert", "default")), 1);
        assert_eq!(inspect(write(dir.path(), "qwen2", "gpt2", "nonesuch")), 1);
        // Supported names, but the file lacks what a model needs: described, refused.
        assert_eq!(inspect(write(dir.path(), "qwen2", "gpt2", "qwen2")), 1);
    }
}
