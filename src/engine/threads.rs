//! The engine's worker threads.
//!
//! A forward pass runs *on* a rayon pool rather than being handed to it piece by piece:
//! the kernels split every matrix product across the pool, and when the thread that drives
//! the model is itself a worker, each split costs one wake-up of the other workers instead
//! of parking and waking the driving thread too (hundreds of times per decoded token).

use std::sync::OnceLock;

/// Run `f` on the engine's pool (sized like rayon's global pool: all logical CPUs, or
/// `RAYON_NUM_THREADS`, or what `quire bench --threads` set). Nested calls run in place.
pub fn run<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    if rayon::current_thread_index().is_some() {
        return f();
    }
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .thread_name(|i| format!("quire-engine-{i}"))
            .build()
            .ok()
    });
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}
