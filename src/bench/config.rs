//! The benchmarks' settings from the environment, read once at the edge (`src/cli/` reads
//! `$QUIRE_LLAMA_CPP_VENV` there) and passed in with each benchmark's options.

use std::path::PathBuf;

/// Environment variable naming the user's own llama-cpp-python venv (read by the CLI).
pub const LLAMA_CPP_VENV_ENV: &str = "QUIRE_LLAMA_CPP_VENV";

/// Where the benchmarks find llama.cpp.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BenchConfig {
    /// The user's llama-cpp-python venv (`$QUIRE_LLAMA_CPP_VENV`: a venv directory, or its
    /// python), used as it is; `None`: the venvs Quire creates under its cache directory
    /// ([`super::engine::llama_python_path`]).
    pub llama_cpp_venv: Option<PathBuf>,
}
