//! Every architecture against llama.cpp without downloading weights: tiny random-weight
//! GGUFs (qwen3, gemma3, hunyuan-dense, llama with Llama 3 RoPE factors; F32, Q8_0 and
//! Q4_K) are written by `scripts/tiny_ggufs.py` (byte-identical on any machine, checked by
//! sha256), and Quire's logits are compared with llama.cpp's, recorded in
//! `tests/fixtures/arch/<arch>-<type>.json` by `scripts/llama_cpp_reference.py`:
//!
//! - F32 weights: at every position of prompt + continuation (128), |Δlogit| ≤ 1e-3 × the
//!   position's logit range over the recorded ids (the top 8 and 64 fixed ids);
//! - Q8_0 / Q4_K: the argmax identical at ≥ 99% of the positions, and |Δlogit| ≤ 5e-2 ×
//!   range (see [`QUANT_TIE_REL`] for the near-ties these random models have);
//! - the 64-token greedy continuation identical (a first divergence is accepted only at a
//!   near-tie of llama.cpp's logits, printed);
//! - a cached prefix is exact: the prompt forwarded in one call or in several (split across
//!   gemma3's 16-token sliding window), after truncating the cache, or from a fork, gives
//!   bit-identical logits; so does one-token decoding.
//!
//! Needs python3 with the PyPI packages `gguf` and `numpy` (installed into a venv under the
//! target directory on first use when python3 lacks them), and the tokenizer source GGUFs
//! from the model store (`quire fetch qwen2.5-coder-0.5b-instruct-q4_k_m
//! smollm2-135m-instruct-q4_1 gemma-3-270m-q4_k_m`). `QUIRE_ARCH_REF_STRICT=1` counts every
//! quantized argmax difference (no near-tie allowance); `QUIRE_ARCH_REF_VERBOSE=1` prints
//! each position's |Δ|.

mod common;

use candle_core::Device;
use common::*;
use quire::engine::sampling::argmax;
use quire::engine::{Engine, LoadOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const TYPES: [&str; 3] = ["f32", "q8_0", "q4_k"];
/// F32: |Δlogit| allowed, relative to the position's logit range.
const F32_REL_TOL: f64 = 1e-3;
/// Quantized: share of positions whose argmax must match.
const ARGMAX_AGREEMENT: f64 = 0.99;
/// F32: a greedy divergence is accepted at a near-tie: llama.cpp's gap < this × range.
const NEAR_TIE_REL: f64 = 1e-3;
/// Quantized: the near-tie band. Both engines quantize activations to 8 bits before the
/// integer dot products, each in its own way (llama.cpp rounds a Q8_0 block's scale to
/// f16, Quire keeps it f32; K-quants have their own activation layouts), and these random
/// 4-8-layer models amplify that noise: llama.cpp's own Q8_0/Q4_K logits differ from the
/// exact result (dequantized weights, f32 activations) by up to ~2e-2 × range, and random
/// logits over a 50k-262k vocabulary have a top-2 gap under that at ~10% of positions. So a
/// differing argmax (or a greedy divergence) where llama.cpp's gap between its choice and
/// Quire's is under this × range is counted as a near-tie, not as a disagreement (unless
/// `QUIRE_ARCH_REF_STRICT` is set).
const QUANT_TIE_REL: f64 = 2e-2;
/// Quantized: |Δlogit| allowed, relative to the range (the noise above is ~1-2e-2;
/// architecture errors such as a wrong window or RoPE base give 0.2-0.6).
const QUANT_REL_TOL: f64 = 5e-2;
/// Where prompt + continuation is split for the cached-prefix checks (gemma3's window is
/// 16: splits before, at and after it, and at multiples).
const SPLITS: [&[usize]; 6] = [&[1], &[15], &[16], &[17], &[33, 64], &[5, 21, 100]];

fn fixture(dir: &Path, stem: &str) -> Value {
    let p = dir.join(format!("{stem}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; record it with /root/.cache/quire/llama-cpp-python/venv/bin/python scripts/llama_cpp_reference.py",
            p.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// A python that can `import gguf, numpy`: `$QUIRE_PYTHON` or `python3` when it can, else a
/// venv in the target's scratch space with the two PyPI packages installed on first use
/// (so the README's test command needs nothing installed by hand).
fn python() -> &'static str {
    static PY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PY.get_or_init(|| {
        let can = |py: &str| {
            Command::new(py)
                .args(["-c", "import gguf, numpy"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let own = std::env::var("QUIRE_PYTHON").unwrap_or_else(|_| "python3".to_string());
        if can(&own) {
            return own;
        }
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("arch-venv");
        let py = venv.join("bin/python").display().to_string();
        if !can(&py) {
            let made = Command::new(&own)
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .unwrap_or_else(|e| panic!("cannot run {own} to make a venv: {e}"));
            assert!(made.success(), "`{own} -m venv {}` failed", venv.display());
            let pip = Command::new(&py)
                .args(["-m", "pip", "install", "-q", "gguf>=0.17", "numpy"])
                .status()
                .unwrap_or_else(|e| panic!("cannot run {py}: {e}"));
            assert!(
                pip.success() && can(&py),
                "installing gguf and numpy from PyPI into {} failed",
                venv.display()
            );
        }
        py
    })
}

/// Write `<arch>-<type>.gguf` for `types` with scripts/tiny_ggufs.py into a directory of
/// the target's scratch space, and return that directory.
fn tiny_ggufs(arch: &str, types: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("arch_reference")
        .join(arch);
    std::fs::create_dir_all(&dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tiny_ggufs.py");
    let sources = [
        ("qwen", QWEN),
        ("smollm", SMOL),
        ("gemma", "gemma-3-270m-q4_k_m"),
    ];
    let needed = match arch {
        "qwen3" | "hunyuan-dense" => "qwen",
        "llama" => "smollm",
        "gemma3" => "gemma",
        other => panic!("unknown arch {other}"),
    };
    let mut cmd = Command::new(python());
    cmd.arg(&script).arg("--out").arg(&dir).args([
        "--arch",
        arch,
        "--type",
        &types.join(","),
        "--quiet",
    ]);
    for (key, name) in sources {
        if key == needed {
            cmd.arg("--tokenizer")
                .arg(format!("{key}={}", model_path_in_store(name).display()));
        }
    }
    let out = cmd.output().expect("run scripts/tiny_ggufs.py");
    assert!(
        out.status.success(),
        "scripts/tiny_ggufs.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn sha256(path: &Path) -> String {
    quire::util::sha256_file_with(path, &mut |_| {}).unwrap()
}

/// Rows of a `[n, vocab]` logits tensor.
fn rows(t: &candle_core::Tensor) -> Vec<Vec<f32>> {
    t.to_dtype(candle_core::DType::F32)
        .unwrap()
        .to_vec2()
        .unwrap()
}

/// llama.cpp's gap between its top logit and its logit of `id` at position `p`, relative to
/// the range; `None` when `id` is not in its top 8.
fn gap_rel(p: &Value, id: u32) -> Option<f64> {
    let top = p["top8"].as_array().unwrap();
    let top1 = top[0][1].as_f64().unwrap();
    let range = p["range"].as_f64().unwrap();
    top.iter()
        .find(|x| x[0].as_u64().unwrap() as u32 == id)
        .map(|x| (top1 - x[1].as_f64().unwrap()) / range)
}

fn same_bits(a: &[Vec<f32>], b: &[Vec<f32>]) -> Option<(usize, usize, f32, f32)> {
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        for (j, (x, y)) in ra.iter().zip(rb).enumerate() {
            if x.to_bits() != y.to_bits() {
                return Some((i, j, *x, *y));
            }
        }
    }
    None
}

/// What one model's comparison found.
struct Report {
    lines: Vec<String>,
    failures: Vec<String>,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/arch")
}

/// Compare Quire on `<dir>/<stem>.gguf` with the fixture `<fixtures>/<stem>.json`; with
/// `check_sha`, first that the file has the fixture's bytes.
fn check_model(dir: &Path, fixtures: &Path, stem: &str, check_sha: bool, report: &mut Report) {
    let f = fixture(fixtures, stem);
    let path = dir.join(format!("{stem}.gguf"));
    let digest = sha256(&path);
    let want = f["gguf_sha256"].as_str().unwrap();
    if check_sha && digest != want {
        report.failures.push(format!(
            "{stem}: scripts/tiny_ggufs.py wrote other bytes (sha256 {digest}, the fixture has {want}; \
             fixture written with {}): a different gguf/numpy version or a changed script; \
             regenerate the fixtures with scripts/llama_cpp_reference.py",
            f["generator"]
        ));
        return;
    }
    let engine = match Engine::load(&path, &Device::Cpu, &LoadOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            report
                .failures
                .push(format!("{stem}: Quire cannot load it: {e:#}"));
            return;
        }
    };
    let prompt = ids(&f["prompt_ids"]);
    let cont = ids(&f["continuation_ids"]);
    let tokens: Vec<u32> = prompt.iter().chain(&cont).copied().collect();
    let fixed = ids(&f["ids"]);
    let positions = f["positions"].as_array().unwrap();
    assert_eq!(positions.len(), tokens.len());
    let quantized = !stem.ends_with("-f32");

    // 1. Every position's logits in one call.
    let mut cache = engine.new_cache().unwrap();
    let full = match engine.model.forward_all(&tokens, &mut cache) {
        Ok(t) => rows(&t),
        Err(e) => {
            report
                .failures
                .push(format!("{stem}: forward_all failed: {e:#}"));
            return;
        }
    };
    let (mut max_abs, mut max_rel, mut worst_pos) = (0f64, 0f64, 0usize);
    let mut agree = 0usize;
    let mut disagree_at = Vec::new();
    let mut rel_per_pos = Vec::new();
    for (j, p) in positions.iter().enumerate() {
        let row = &full[j];
        let range = p["range"].as_f64().unwrap();
        let mut compared: Vec<(u32, f64)> = p["top8"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x[0].as_u64().unwrap() as u32, x[1].as_f64().unwrap()))
            .collect();
        compared.extend(fixed.iter().copied().zip(floats(&p["logits"])));
        let mut pos_rel = 0f64;
        for (id, want) in compared {
            let d = (row[id as usize] as f64 - want).abs();
            pos_rel = pos_rel.max(d / range);
            if d > max_abs {
                max_abs = d;
            }
            if d / range > max_rel {
                max_rel = d / range;
                worst_pos = j;
            }
        }
        rel_per_pos.push(pos_rel);
        let ours = argmax(row);
        if ours as u64 == p["argmax"].as_u64().unwrap() {
            agree += 1;
        } else {
            disagree_at.push((j, gap_rel(p, ours)));
        }
    }
    let strict = std::env::var_os("QUIRE_ARCH_REF_STRICT").is_some();
    let tie_band = if quantized && !strict {
        QUANT_TIE_REL
    } else {
        0.0
    };
    let near_ties = disagree_at
        .iter()
        .filter(|(_, g)| g.is_some_and(|g| g < tie_band))
        .count();
    let share = agree as f64 / positions.len() as f64;
    let share_ties = (agree + near_ties) as f64 / positions.len() as f64;
    let mut sorted = rel_per_pos.clone();
    sorted.sort_by(f64::total_cmp);
    let median_rel = sorted[sorted.len() / 2];
    if std::env::var_os("QUIRE_ARCH_REF_VERBOSE").is_some() {
        let per: Vec<String> = rel_per_pos.iter().map(|r| format!("{r:.1e}")).collect();
        report
            .lines
            .push(format!("{stem}: |Δ|/range per position: {}", per.join(" ")));
    }
    report.lines.push(format!(
        "{stem}: max |Δlogit| {max_abs:.3e} (max {max_rel:.2e} × range, at position {worst_pos}; median position {median_rel:.2e} × range); argmax {agree}/{} ({:.1}%){}",
        positions.len(),
        100.0 * share,
        if disagree_at.is_empty() {
            String::new()
        } else {
            let at: Vec<String> = disagree_at
                .iter()
                .map(|(j, g)| match g {
                    Some(g) => format!("{j} (llama.cpp gap {g:.1e} × range)"),
                    None => format!("{j} (not in llama.cpp's top 8)"),
                })
                .collect();
            format!(", differs at {}", at.join(", "))
        }
    ));
    if !quantized && max_rel > F32_REL_TOL {
        report.failures.push(format!(
            "{stem}: max |Δlogit| is {max_rel:.2e} × the logit range (position {worst_pos}), over {F32_REL_TOL:e}"
        ));
    }
    if quantized && share_ties < ARGMAX_AGREEMENT {
        report.failures.push(format!(
            "{stem}: argmax agrees at {agree}/{} positions ({near_ties} more within a near-tie of {tie_band:e} × range), under {}%",
            positions.len(),
            100.0 * ARGMAX_AGREEMENT
        ));
    }
    if quantized && max_rel > QUANT_REL_TOL {
        report.failures.push(format!(
            "{stem}: max |Δlogit| is {max_rel:.2e} × the logit range (position {worst_pos}), over {QUANT_REL_TOL:e}"
        ));
    }

    // 2. Greedy continuation, one token per call; each step's logits must also be the
    // batched row bit for bit while the tokens are llama.cpp's.
    let mut cache = engine.new_cache().unwrap();
    let mut last = rows(&engine.model.forward_all(&prompt, &mut cache).unwrap());
    let mut step_rows = vec![last.pop().unwrap()];
    let mut ours = Vec::new();
    for s in 0..cont.len() {
        let tok = argmax(step_rows.last().unwrap());
        ours.push(tok);
        if s + 1 < cont.len() {
            let l = engine.model.forward(&[tok], &mut cache).unwrap();
            step_rows.push(
                l.to_dtype(candle_core::DType::F32)
                    .unwrap()
                    .to_vec1()
                    .unwrap(),
            );
        }
    }
    match ours.iter().zip(&cont).position(|(a, b)| a != b) {
        None => report.lines.push(format!(
            "{stem}: greedy continuation identical ({} tokens)",
            cont.len()
        )),
        Some(s) => {
            let p = &positions[prompt.len() - 1 + s];
            let range = f["continuation_range"][s].as_f64().unwrap();
            let top1 = p["top8"][0][1].as_f64().unwrap();
            let theirs_of_ours = p["top8"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x[0].as_u64().unwrap() as u32 == ours[s])
                .map(|x| x[1].as_f64().unwrap());
            let gap = theirs_of_ours.map(|v| top1 - v);
            let msg = format!(
                "{stem}: greedy continuation differs at step {s}: Quire {} vs llama.cpp {} (llama.cpp's gap between them {}, range {range:.3}; Quire's: {:.3e}); Quire {:?} vs llama.cpp {:?}",
                ours[s],
                cont[s],
                gap.map_or("not in its top 8".to_string(), |g| format!("{g:.3e}")),
                step_rows[s][cont[s] as usize] - step_rows[s][ours[s] as usize],
                &ours[..(s + 1).min(ours.len())],
                &cont[..(s + 1).min(cont.len())]
            );
            let band = if quantized && !strict {
                QUANT_TIE_REL
            } else {
                NEAR_TIE_REL
            };
            let near_tie = gap.is_some_and(|g| g < band * range);
            report.lines.push(format!(
                "{msg}{}",
                if near_tie {
                    " — a near-tie, accepted"
                } else {
                    ""
                }
            ));
            if !near_tie {
                report.failures.push(msg);
            }
        }
    }
    let agree_len = ours.iter().zip(&cont).take_while(|(a, b)| a == b).count();
    // step_rows[s] is the logits after prompt + cont[..s]: row prompt.len() - 1 + s.
    let n_same = (agree_len + 1).min(step_rows.len());
    let batched = &full[prompt.len() - 1..prompt.len() - 1 + n_same];
    if let Some((i, j, a, b)) = same_bits(&step_rows[..n_same], batched) {
        report.failures.push(format!(
            "{stem}: one-token decoding differs from the batched pass at step {i}, id {j}: {a} vs {b}"
        ));
    }

    // 3. Cached prefix = recompute, bit for bit.
    for splits in SPLITS {
        let mut cache = engine.new_cache().unwrap();
        let mut got = Vec::new();
        let mut start = 0;
        for &end in splits.iter().chain(std::iter::once(&tokens.len())) {
            got.extend(rows(
                &engine
                    .model
                    .forward_all(&tokens[start..end], &mut cache)
                    .unwrap(),
            ));
            start = end;
        }
        if let Some((i, j, a, b)) = same_bits(&got, &full) {
            report.failures.push(format!(
                "{stem}: split at {splits:?} differs from one call at position {i}, id {j}: {a} vs {b}"
            ));
        }
    }
    // Truncate a full cache back to a prefix and recompute the rest; and from a fork.
    for cut in [16usize, 40] {
        let mut cache = engine.new_cache().unwrap();
        engine.model.forward_all(&tokens, &mut cache).unwrap();
        cache.truncate(cut);
        let rest = rows(
            &engine
                .model
                .forward_all(&tokens[cut..], &mut cache)
                .unwrap(),
        );
        if let Some((i, j, a, b)) = same_bits(&rest, &full[cut..]) {
            report.failures.push(format!(
                "{stem}: after truncating the cache to {cut}, position {} id {j} differs: {a} vs {b}",
                cut + i
            ));
        }
        let mut cache = engine.new_cache().unwrap();
        engine
            .model
            .forward_all(&tokens[..cut + 20], &mut cache)
            .unwrap();
        let mut forked = cache.fork(cut, tokens.len()).unwrap();
        let rest = rows(
            &engine
                .model
                .forward_all(&tokens[cut..], &mut forked)
                .unwrap(),
        );
        if let Some((i, j, a, b)) = same_bits(&rest, &full[cut..]) {
            report.failures.push(format!(
                "{stem}: from a fork at {cut}, position {} id {j} differs: {a} vs {b}",
                cut + i
            ));
        }
    }
}

/// `QUIRE_KV_DTYPE` as the CLI reads it (`f32` keeps f32 keys and values on CPUs that
/// would store bf16), for comparisons.
fn install_engine_settings() {
    let kv = std::env::var("QUIRE_KV_DTYPE").ok();
    let cfg = quire::engine::config::EngineConfig::default()
        .with_overrides(None, kv.as_deref())
        .unwrap();
    quire::engine::config::install(&cfg).unwrap();
}

fn run_arch(arch: &str) {
    install_engine_settings();
    let dir = tiny_ggufs(arch, &TYPES);
    let mut report = Report {
        lines: Vec::new(),
        failures: Vec::new(),
    };
    for t in TYPES {
        check_model(
            &dir,
            &fixtures_dir(),
            &format!("{arch}-{t}"),
            true,
            &mut report,
        );
    }
    if report.failures.is_empty() {
        // ~100-250 MB per architecture; kept after a failure, for a closer look.
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        report
            .lines
            .push(format!("{arch}: the GGUFs are kept in {}", dir.display()));
    }
    finish(arch, report);
}

fn finish(what: &str, report: Report) {
    for l in &report.lines {
        eprintln!("{l}");
    }
    assert!(
        report.failures.is_empty(),
        "{what}: {} failure(s):\n{}",
        report.failures.len(),
        report.failures.join("\n")
    );
}

#[test]
fn llama_with_rope_factors_matches_llama_cpp() {
    run_arch("llama");
}

#[test]
fn qwen3_matches_llama_cpp() {
    run_arch("qwen3");
}

#[test]
fn gemma3_matches_llama_cpp() {
    run_arch("gemma3");
}

#[test]
fn hunyuan_dense_matches_llama_cpp() {
    run_arch("hunyuan-dense");
}

/// For investigations: with `QUIRE_ARCH_REF_DIR` set, compare every `<stem>.gguf` there with
/// the `<stem>.json` beside it (written by `scripts/llama_cpp_reference.py --ggufs DIR --out
/// DIR`), without the sha256 check. Run it with `--ignored`.
#[test]
#[ignore = "an investigation tool: set QUIRE_ARCH_REF_DIR and run with --ignored"]
fn extra_ggufs_match_llama_cpp() {
    let dir = std::env::var_os("QUIRE_ARCH_REF_DIR").expect(
        "set QUIRE_ARCH_REF_DIR to a directory of <stem>.gguf with <stem>.json beside each",
    );
    install_engine_settings();
    let dir = PathBuf::from(dir);
    let mut stems: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let stem = name.strip_suffix(".gguf")?.to_string();
            dir.join(format!("{stem}.json")).is_file().then_some(stem)
        })
        .collect();
    stems.sort();
    let mut report = Report {
        lines: Vec::new(),
        failures: Vec::new(),
    };
    for stem in &stems {
        check_model(&dir, &dir, stem, false, &mut report);
    }
    finish(&dir.display().to_string(), report);
}
