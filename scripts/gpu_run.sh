#!/usr/bin/env bash
# Run everything issue 13 part 2 needs on a Hopper GPU machine WITHOUT MLIR, from a bundle built
# elsewhere with `python -m cutedsl bundle --out BUNDLE` (same checkout), numpy + cuda-python
# (+ torch or cupy for cuBLAS) only.
#
#   scripts/gpu_run.sh BUNDLE OUT
#
# Steps (each under a time limit, each one's exit status in OUT/summary.txt; a failing step does
# not stop the next): env, verify (every kernel of the bundle in its cache), tests (the gpu-marked
# tests), main (the main job with --check), identity (integer inputs: GPU bit-identical with the
# emulator, every bundled schedule), bench (square, skinny, paper, stages vs cuBLAS).
# OUT stays flat and small (the GPU tool brings back 8 files): gpu_run.log (every step's output),
# summary.txt, gpu_tests.xml, identity.json, bench.json, bench.csv, bench.png.
#
# Environment: PYTHON (default python3), STEPS (default "env verify tests main identity bench"),
# GPU_RUN_DRY=1 (no GPU: gpu steps run on the emulator or compile-free, for testing this script),
# T_TESTS T_MAIN T_IDENTITY T_BENCH (seconds per step), T_TEST (seconds per gpu test, with
# pytest-timeout). bench.json/bench.csv are rewritten after each shape set, so a step killed by
# its limit keeps the sets it finished; the log shows one line per timed point.
set -u
if [ $# -ne 2 ]; then echo "usage: $0 BUNDLE OUT" >&2; exit 2; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=$(cd "$1" && pwd) || { echo "no bundle directory $1" >&2; exit 2; }
mkdir -p "$2" && OUT=$(cd "$2" && pwd)
PY=${PYTHON:-python3}
STEPS=${STEPS:-"env verify tests main identity bench"}
DRY=${GPU_RUN_DRY:-0}
cd "$ROOT"
export CUTEDSL_CACHE_DIR="$BUNDLE/cache" PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
LOG="$OUT/gpu_run.log"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
manifest() { "$PY" -m cutedsl bundle --out "$BUNDLE" --print "$1"; }

step() {   # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  echo "=== $(date -u +%FT%TZ) step $name: $*" >>"$LOG"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  echo "=== step $name: exit $rc after $((SECONDS - t0)) s" >>"$LOG"
  printf '%-9s exit %3d  %4d s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$SUMMARY"
}

env_report() {
  date -u; uname -a
  nvidia-smi || echo "(no nvidia-smi)"
  "$PY" -c 'import sys, platform; print("python", platform.python_version(), sys.executable)'
  "$PY" -m pip list 2>/dev/null | grep -i -E '^(numpy|attrs|ml.dtypes|cuda|torch |cupy|rich|tqdm|matplotlib|pytest |mlir)' || true
  "$PY" -c 'import mlir.ir; print("MLIR is importable here")' 2>/dev/null || echo "MLIR is not importable here (kernels come from the bundle only)"
  "$PY" -c 'import json, sys; m = json.load(open(sys.argv[1]))
print("bundle:", {k: m[k] for k in ("plan", "created_utc", "source_hash", "size_bytes")}, len(m["entries"]), "kernels")' \
    "$BUNDLE/manifest.json"
}
export -f env_report
export PY BUNDLE

if [ "$DRY" = 1 ]; then BACKEND=sim; MAIN_BACKEND=none; else BACKEND=cuda; MAIN_BACKEND=cuda; fi
read -r -a BENCH_ARGS <<<"$(manifest bench_args)"
read -r -a IDENTITY_ARGS <<<"$(manifest identity_args)"
read -r -a MAIN_ARGS <<<"$(manifest main_args)"
read -r -a TESTS <<<"$(manifest tests)"
if [ "$DRY" = 1 ]; then   # backend none runs nothing, so there is nothing for --check to compare
  for i in "${!MAIN_ARGS[@]}"; do [ "${MAIN_ARGS[$i]}" = --check ] && unset 'MAIN_ARGS[i]'; done
  MAIN_ARGS=("${MAIN_ARGS[@]}")
fi

step env 60 bash -c env_report
step verify 120 "$PY" -m cutedsl bundle --out "$BUNDLE" --verify
# -v: a test that hangs is named in the log; pytest-timeout (where installed) dumps its stack
PYTEST_TIMEOUT=()
"$PY" -c 'import pytest_timeout' 2>/dev/null && PYTEST_TIMEOUT=(--timeout "${T_TEST:-120}" --timeout-method thread)
if [ ${#TESTS[@]} -gt 0 ]; then
  step tests "${T_TESTS:-400}" "$PY" -m pytest -v -rfEs -p no:cacheprovider -m gpu "${PYTEST_TIMEOUT[@]}" \
    --junitxml="$OUT/gpu_tests.xml" "${TESTS[@]}"
fi
# the main job runs the bundle's export (Gemm.save -> cutedsl.load: no compiler involved)
EXPORT_DIR=$(manifest export 2>/dev/null || true)
LOAD_ARGS=()
[ -n "$EXPORT_DIR" ] && LOAD_ARGS=(--load "$BUNDLE/$EXPORT_DIR")
step main "${T_MAIN:-120}" "$PY" -m cutedsl "${MAIN_ARGS[@]}" "${LOAD_ARGS[@]}" --backend "$MAIN_BACKEND"
step identity "${T_IDENTITY:-300}" "$PY" -m cutedsl bench --identity "${IDENTITY_ARGS[@]}" --backend "$BACKEND" \
  --json "$OUT/identity.json"
step bench "${T_BENCH:-540}" "$PY" -m cutedsl bench "${BENCH_ARGS[@]}" --backend "$BACKEND" \
  --json "$OUT/bench.json" --csv "$OUT/bench.csv" --plot "$OUT/bench.png"

# what the GPU tool's reply shows (the end of stdout): the summary and the key lines of each step
echo "--- summary ($OUT) ---"
cat "$SUMMARY"
echo "--- gpu tests: failures and totals ---"
grep -E '^(FAILED|ERROR) |^=+ .*[0-9]+ (passed|failed|skipped)' "$LOG" | tail -n 40
echo "--- main job and identity ---"
grep -E 'check vs float64|GPU time|: error:|identical=|^bit identity|^[0-9]+ passed, [0-9]+ failed$' "$LOG" | tail -n 40
echo "--- bench: geometric means ---"
grep -E '^== |^  geomean|^cutedsl bench|nvidia-smi:' "$LOG" | tail -n 80
! grep -q -v ' exit   0 ' "$SUMMARY"
