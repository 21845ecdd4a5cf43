//! `quire inspect [MODEL] [--json]`: what a GGUF model is, without running it.

use crate::engine::arch::ModelConfig;
use crate::engine::chat_template::ChatTemplate;
use crate::engine::gguf::GgufFile;
use crate::engine::tokenizer::Tokenizer;
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

/// Run `quire inspect`.
pub fn run(args: InspectArgs) -> Result<i32> {
    let path = crate::model_store::resolve_model(args.model.as_deref(), true, args.json)?;
    let gguf = GgufFile::open(&path)?;
    let cfg = ModelConfig::from_gguf(&gguf)?;
    let kv = crate::engine::kv_cache::KvLayout::for_device(&cfg, &candle_core::Device::Cpu);
    let tok = Tokenizer::for_model(&gguf)?;
    let template = ChatTemplate::from_gguf(&gguf)?;
    let info = json!({
        "path": path.display().to_string(),
        "file_bytes": gguf.file_len,
        "name": gguf.meta_str("general.name").unwrap_or(""),
        "architecture": cfg.architecture,
        "parameters": gguf.parameter_count(),
        "tensor_types": gguf.tensor_type_counts().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "config": cfg,
        "kv_bytes_per_token": cfg.kv_bytes_per_token(kv.elem_bytes()),
        "kv_dtype": kv.dtype_name(),
        "tokenizer": {
            "source": tok.source,
            "vocab_size": tok.vocab_size(),
            "bos": tok.bos_token, "bos_id": tok.bos_id,
            "eos": tok.eos_token, "eos_ids": tok.eos_ids,
        },
        "chat_template": {"origin": template.origin, "source": template.source},
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        println!("path           {}", path.display());
        println!("name           {}", info["name"].as_str().unwrap_or(""));
        println!("architecture   {}", cfg.architecture);
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
        println!(
            "tokenizer      {} ({} tokens; bos {:?}, eos {:?})",
            tok.source,
            tok.vocab_size(),
            tok.bos_token,
            tok.eos_ids
        );
        println!(
            "chat template  {} ({} bytes)",
            template.origin,
            template.source.len()
        );
    }
    Ok(0)
}
