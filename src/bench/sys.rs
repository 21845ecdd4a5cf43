//! The machine under the benchmark: CPU model, core count, threads, peak resident memory,
//! and measured memory bandwidth.

use serde::Serialize;
use std::time::Instant;

/// What the benchmark ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo ("unknown" elsewhere).
    pub cpu_model: String,
    /// Logical CPUs available to this process.
    pub logical_cpus: usize,
    /// Threads the engines were told to use.
    pub threads: usize,
    /// Total memory in GiB (from /proc/meminfo), if known.
    pub memory_gib: Option<f64>,
    /// `std::env::consts::OS` / `ARCH`.
    pub os_arch: String,
}

impl Machine {
    /// Describe this machine, with `threads` the thread count used.
    pub fn detect(threads: usize) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        let memory_gib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map(|kib| kib / (1024.0 * 1024.0))
        });
        Self {
            cpu_model,
            logical_cpus: logical_cpus(),
            threads,
            memory_gib,
            os_arch: format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} | {} logical CPUs | {} threads used | {} | {}",
            self.cpu_model,
            self.logical_cpus,
            self.threads,
            self.memory_gib
                .map(|g| format!("{g:.1} GiB RAM"))
                .unwrap_or_else(|| "RAM unknown".into()),
            self.os_arch
        )
    }
}

/// The 1-, 5- and 15-minute load averages (/proc/loadavg; Linux only): a benchmark on a
/// machine that is busy with other work reports it, since its numbers then understate.
pub fn load_average() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Warn on stderr when the 1-minute load average shows other work on the CPUs.
pub fn warn_if_busy() {
    if let Some([one, _, _]) = load_average() {
        if one >= 0.5 {
            eprintln!(
                "warning: load average {one:.2}: other work is using the CPUs, so the numbers will understate; rerun on an idle machine"
            );
        }
    }
}

/// Load averages as "1m/5m/15m", or "unknown".
pub fn load_average_text(l: Option<[f64; 3]>) -> String {
    l.map(|[a, b, c]| format!("{a:.2}/{b:.2}/{c:.2}"))
        .unwrap_or_else(|| "unknown".into())
}

/// Logical CPUs available to this process.
pub fn logical_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn status_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Peak resident set size of this process in MiB (`VmHWM` in /proc/self/status; Linux only).
pub fn peak_rss_mib() -> Option<f64> {
    status_kib("VmHWM:").map(|k| k as f64 / 1024.0)
}

/// Current resident set size of this process in MiB (`VmRSS`; Linux only).
pub fn rss_mib() -> Option<f64> {
    status_kib("VmRSS:").map(|k| k as f64 / 1024.0)
}

/// Use `threads` threads for the engine's kernels: sizes rayon's global pool (Quire's
/// kernels and the attention kernel). Must run before the engine first computes anything;
/// returns the thread count in effect. Candle's own CPU kernels read `RAYON_NUM_THREADS`,
/// which the caller at the edge sets (`quire bench` does, before it calls a benchmark).
pub fn use_threads(threads: usize) -> usize {
    let threads = threads.max(1);
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global();
    rayon::current_num_threads()
}

/// Measured memory bandwidth.
#[derive(Debug, Clone, Serialize)]
pub struct Bandwidth {
    /// Best read bandwidth over the runs, in GB/s (10^9 bytes per second).
    pub read_gb_s: f64,
    /// Buffer size in MiB.
    pub buffer_mib: usize,
    /// Reader threads.
    pub threads: usize,
    /// Runs (best taken).
    pub runs: usize,
    /// The slowest run, GB/s (how much the machine's bandwidth moved while measuring).
    pub slowest_gb_s: f64,
}

impl Bandwidth {
    /// Both sets of runs as one: the best of all, the slowest of all.
    pub fn merge(self, other: Bandwidth) -> Bandwidth {
        Bandwidth {
            read_gb_s: self.read_gb_s.max(other.read_gb_s),
            slowest_gb_s: self.slowest_gb_s.min(other.slowest_gb_s),
            runs: self.runs + other.runs,
            ..self
        }
    }
}

/// Read bandwidth: `threads` threads each sum their share of a `buffer_mib` MiB buffer of
/// u64 (far larger than any CPU cache, so every pass streams from DRAM); the best of `runs`
/// passes. This is the rate at which a decoder can stream weights, the bound on decode speed.
pub fn memory_bandwidth(threads: usize, buffer_mib: usize, runs: usize) -> Bandwidth {
    let threads = threads.max(1);
    let words = buffer_mib * 1024 * 1024 / 8;
    // Non-zero fill so every page is really backed by memory.
    let buf: Vec<u64> = (0..words as u64).map(|i| i | 1).collect();
    let chunk = words.div_ceil(threads);
    let mut best = f64::INFINITY;
    let mut worst = 0f64;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(chunk)
                .map(|part| s.spawn(move || sum_words(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(total);
        best = best.min(start.elapsed().as_secs_f64());
        worst = worst.max(start.elapsed().as_secs_f64());
    }
    Bandwidth {
        read_gb_s: (words * 8) as f64 / best / 1e9,
        slowest_gb_s: (words * 8) as f64 / worst / 1e9,
        buffer_mib,
        threads,
        runs: runs.max(1),
    }
}

fn sum_words(part: &[u64]) -> u64 {
    // Eight independent accumulators so the loop is bound by loads, not by an add chain.
    let mut acc = [0u64; 8];
    let mut it = part.chunks_exact(8);
    for c in &mut it {
        for (a, x) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*x);
        }
    }
    let rest: u64 = it.remainder().iter().fold(0, |a, x| a.wrapping_add(*x));
    acc.iter().fold(rest, |a, x| a.wrapping_add(*x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_positive() {
        let b = memory_bandwidth(2, 16, 2);
        assert!(b.read_gb_s > 0.1, "{b:?}");
    }

    #[test]
    fn machine_has_cpus() {
        let m = Machine::detect(1);
        assert!(m.logical_cpus >= 1);
        if cfg!(target_os = "linux") {
            assert!(peak_rss_mib().unwrap() > 0.0);
        }
    }
}
