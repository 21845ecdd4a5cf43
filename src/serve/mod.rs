//! `quire serve`: the engine behind an OpenAI-compatible HTTP API, so that book tools and
//! OpenAI SDKs can use its exact prefix cache and batched decoding.
//!
//! Two sides, one channel between them. The HTTP side ([`routes`], on a small tokio
//! runtime) checks each request ([`openai`]) and queues it; the engine thread ([`worker`])
//! decodes up to `max_batch` requests together, continuously: a request joins as soon as a
//! slot is free and leaves when it ends or its client disconnects. Every request's stable
//! prefix — the rendered conversation up to its last message — is looked up in the prefix
//! cache (memory, then disk) and stored there once computed, so requests sharing a system
//! prompt (a translation guide, a glossary) compute it once; the reply reports the reused
//! tokens in `usage.prompt_tokens_details.cached_tokens`.

pub mod openai;
pub mod routes;
pub mod worker;

use crate::engine::backend::{ChatBackend, LocalBackend};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::Arc;

/// How to serve (built once by the CLI).
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to bind (loopback unless the user says otherwise).
    pub addr: SocketAddr,
    /// Bearer key required on `/v1` requests.
    pub api_key: Option<String>,
    /// Requests decoded together.
    pub max_batch: usize,
    /// Requests waiting for a slot before new ones get 503.
    pub max_queue: usize,
    /// Largest request body, in bytes (413 above it).
    pub max_request_bytes: usize,
}

/// Serve `backend` until SIGINT or SIGTERM; then stop accepting connections, finish the
/// requests in flight and return. `on_ready` gets the bound address (with the real port
/// when 0 was asked for).
pub fn serve(
    backend: LocalBackend,
    cfg: &ServeConfig,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<()> {
    let model_id = backend.model_name();
    let (jobs, queue) = std::sync::mpsc::sync_channel(cfg.max_queue);
    let max_batch = cfg.max_batch.max(1);
    let engine_thread = std::thread::Builder::new()
        .name("quire-engine".into())
        .spawn(move || worker::run(backend, queue, max_batch))
        .context("cannot start the engine thread")?;
    let state = Arc::new(routes::AppState {
        jobs,
        model_id,
        api_key: cfg.api_key.clone(),
        max_request_bytes: cfg.max_request_bytes,
        created: routes::unix_now(),
        next_id: Default::default(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("quire-http")
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(cfg.addr)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.addr))?;
        on_ready(listener.local_addr()?);
        axum::serve(listener, routes::router(state))
            .with_graceful_shutdown(shutdown_signal())
            .await
            .context("the HTTP server failed")
    })?;
    // Every sender is gone with the router: the engine thread ends once its batch is done.
    drop(runtime);
    engine_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the engine thread panicked"))
}

/// SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("quire serve: shutting down (finishing the requests in flight)");
}
