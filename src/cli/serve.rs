//! `quire serve`: the engine behind an OpenAI-compatible HTTP API.

use super::ModelArgs;
use crate::engine::backend::LocalBackend;
use crate::engine::prefix_cache::disk::DiskPrefixCache;
use crate::serve::{serve, ServeConfig};
use anyhow::{bail, Context, Result};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// Arguments of `quire serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The model, device and chat template (`--model`, `--device`, `--chat-template`).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on (loopback by default; 0.0.0.0 exposes the server to the network).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (0: any free port, printed on start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 requests.
    #[arg(long, conflicts_with = "api_key_env")]
    pub api_key: Option<String>,
    /// Read the required API key from this environment variable (keeps it out of `ps`).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Requests decoded together (one forward pass advances all of them).
    #[arg(long, default_value_t = 16)]
    pub max_batch: usize,
    /// Requests waiting for a free slot; beyond this a request gets 503.
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// Largest request body in bytes (413 above it).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_request_bytes: usize,
    /// Prefix KV cache directory shared by all requests and later runs (default: the user
    /// cache dir, or $QUIRE_PREFIX_CACHE_DIR).
    #[arg(long)]
    pub prefix_cache_dir: Option<PathBuf>,
    /// Keep prefix KV caches in memory only.
    #[arg(long)]
    pub no_disk_cache: bool,
    /// In-memory prefix cache budget in MiB.
    #[arg(long, default_value_t = 2048)]
    pub prefix_cache_mib: usize,
}

/// Run `quire serve` until SIGINT/SIGTERM.
pub fn run(args: ServeArgs) -> Result<i32> {
    if args.max_batch == 0 || args.max_queue == 0 {
        bail!("--max-batch and --max-queue must be at least 1");
    }
    let api_key = match &args.api_key_env {
        Some(var) => Some(std::env::var(var).with_context(|| {
            format!("--api-key-env {var}: the environment variable is not set")
        })?),
        None => args.api_key.clone(),
    };
    if api_key.as_deref() == Some("") {
        bail!("the API key is empty");
    }
    let engine = args.model.load(false)?;
    let disk = super::prefix_cache_dir(args.prefix_cache_dir.clone(), args.no_disk_cache)
        .map(|dir| DiskPrefixCache::new(&dir, 4 << 30));
    let backend = LocalBackend::new(engine, args.prefix_cache_mib << 20, disk)?;
    let cfg = ServeConfig {
        addr: SocketAddr::new(args.host, args.port),
        api_key,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
        max_request_bytes: args.max_request_bytes,
    };
    serve(backend, &cfg, |addr| {
        eprintln!("quire serve: listening on http://{addr}/v1 (Ctrl-C to stop)");
    })?;
    Ok(0)
}
