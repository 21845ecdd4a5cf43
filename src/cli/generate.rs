//! `quire generate`: one chat turn, streamed to stdout, statistics to stderr.

use super::{DraftArgs, ModelArgs};
use crate::engine::chat_template::Message;
use crate::engine::generate::GenerationParams;
use crate::engine::sampling::SamplingParams;
use anyhow::{bail, Context, Result};
use std::io::Write;

/// Arguments of `quire generate`.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// The model, device and chat template (`--model`, `--device`, `--chat-template`).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Speculative decoding (`--draft`).
    #[command(flatten)]
    pub draft: DraftArgs,
    /// The user message.
    #[arg(long, short)]
    pub prompt: String,
    /// An optional system message.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1.0 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Repetition penalty (1.0 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Stop before this string (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Send --prompt as it is, with no chat template (a base model's plain completion, as
    /// llama.cpp's completion runs it): the BOS token goes first when the model's tokenizer
    /// asks for one, and special-token text in the prompt becomes its token. --system is
    /// refused.
    #[arg(long)]
    pub raw: bool,
    /// Also print the prompt's and the generated token ids, as one JSON line on stderr
    /// (`{"prompt_ids":[…],"generated_ids":[…]}`), to compare with another engine token for
    /// token.
    #[arg(long)]
    pub print_ids: bool,
}

/// Run `quire generate`.
pub fn run(args: GenerateArgs) -> Result<i32> {
    let engine = args.model.load(false)?;
    let mut draft = args.draft.load(&engine)?;
    let tokens = if args.raw {
        if args.system.is_some() {
            bail!("--system needs a chat template; --raw sends --prompt as it is");
        }
        let mut tokens = engine.encode(&args.prompt)?;
        if engine.tokenizer.add_bos {
            let bos = engine.tokenizer.bos_id.with_context(|| {
                format!(
                    "{}: the tokenizer asks for a BOS token but names none",
                    engine.path.display()
                )
            })?;
            tokens.insert(0, bos);
        }
        tokens
    } else {
        let mut msgs = Vec::new();
        if let Some(s) = &args.system {
            msgs.push(Message::system(s.clone()));
        }
        msgs.push(Message::user(args.prompt.clone()));
        engine.encode(&engine.template.render(&msgs, true)?)?
    };
    let params = GenerationParams {
        max_new_tokens: args.max_tokens,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            repetition_penalty: args.repeat_penalty,
            seed: args.seed,
            ..Default::default()
        },
        stop_strings: args.stop.clone(),
        constraint: None,
    };
    let mut cache = engine.new_cache()?;
    let stdout = std::io::stdout();
    let mut print = |piece: &str| {
        let mut out = stdout.lock();
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    };
    let gen = match draft.as_mut() {
        Some(d) => engine.generate_speculative(&mut cache, &tokens, &params, d, 0, &mut print)?,
        None => engine.generate(&mut cache, &tokens, &params, &mut print)?,
    };
    println!();
    eprintln!(
        "model {} | load {:.2}s | prompt {} tokens, prefill {:.2}s ({:.1} tok/s) | {} new tokens, decode {:.1} tok/s | finish: {:?}",
        engine.path.display(),
        engine.load_seconds,
        gen.prompt_tokens,
        gen.prefill_seconds,
        gen.prefill_tokens_per_second(),
        gen.tokens.len(),
        gen.decode_tokens_per_second(),
        gen.finish
    );
    if args.print_ids {
        eprintln!(
            "{}",
            serde_json::json!({"prompt_ids": tokens, "generated_ids": gen.tokens})
        );
    }
    if let Some(d) = &draft {
        eprintln!(
            "draft {} | {} tokens proposed, {} accepted ({:.0}%)",
            d.engine.path.display(),
            gen.draft_proposed,
            gen.draft_accepted,
            100.0 * gen.draft_accepted as f64 / gen.draft_proposed.max(1) as f64
        );
    }
    Ok(0)
}
