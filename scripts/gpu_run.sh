#!/usr/bin/env bash
# One GPU lease in one call (docs/gpu-lease.md): the gpu tests, cuBLAS side by side, attention
# vs SDPA (once it exists), launch overhead and cold start -- within a time budget, from a bundle
# compiled elsewhere (python -m cutedsl bundle: cubins + exports, no MLIR needed here), with the
# machine's own Python (torch, cupy, cuda-bindings, numpy).
#
#   scripts/gpu_run.sh BUNDLE OUT                on the GPU machine
#   scripts/gpu_run.sh --dry-run [BUNDLE [OUT]]  here, without a GPU: build the bundle (into BUNDLE,
#                                                or a temporary folder; a BUNDLE that verifies and
#                                                is of the same plan is reused), check that it and
#                                                the working tree fit what the device tool carries,
#                                                then run every step on the emulator (tiny shapes)
#
# The driver is python -m cutedsl.bench.lease: one deadline, each step skipped (and recorded so,
# with the seconds left) when its minimum time no longer fits, every result flat in OUT (at most
# 8 files: gpu_run.log summary.json gpu_tests.xml bench.json bench.csv startup.json
# [attention.json]) and a short table at the end of the output.
#
# Environment: PYTHON (default python3: on the GPU machine, the one with torch), GPU_RUN_BUDGET_S
# (seconds for the whole run, default 360), STEPS (comma list of env,tests,bench,attention,startup),
# GPU_RUN_PLAN (dry run: the plan to build, default gpu; smoke for a quick test),
# GPU_RUN_TREE_LIMIT_MIB (dry run: working tree + bundle at most this, default 60 of the tool's 64).
set -u
DRY=0
if [ "${1:-}" = --dry-run ]; then DRY=1; shift; fi
if [ $DRY = 0 ] && [ $# -ne 2 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUNDLE OUT  |  $0 --dry-run [BUNDLE [OUT]]" >&2; exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ $DRY = 1 ]; then
  if [ $# -lt 2 ]; then TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu-run-dry.XXXXXX") || exit 1; fi
  BUNDLE=${1:-$TMP/bundle}
  OUT=${2:-$TMP/out}
  PLAN=${GPU_RUN_PLAN:-gpu}
  have=$(CUTEDSL_CACHE_DIR="$BUNDLE/cache" "$PY" -m cutedsl bundle --out "$BUNDLE" --print plan 2>/dev/null)
  if [ "$have" = "$PLAN" ] && CUTEDSL_CACHE_DIR="$BUNDLE/cache" "$PY" -m cutedsl bundle --out "$BUNDLE" --verify \
      >/dev/null 2>&1; then
    echo "dry run: reusing bundle $BUNDLE (plan $PLAN, verified)"
  else
    echo "dry run: building bundle $BUNDLE (plan $PLAN)"
    "$PY" -m cutedsl bundle --out "$BUNDLE" --plan "$PLAN" || { echo "dry run: the bundle failed" >&2; exit 1; }
  fi
  # what the device tool carries: tracked and untracked-not-ignored files, plus the bundle
  tree=$(cd "$ROOT" && git ls-files -z -co --exclude-standard | du -cb --files0-from=- | tail -n 1 | cut -f1)
  bundle=$(du -sb "$BUNDLE" | cut -f1)
  limit_mib=${GPU_RUN_TREE_LIMIT_MIB:-60}
  awk -v t="${tree:-0}" -v b="$bundle" -v l="$limit_mib" 'BEGIN { m = 1048576
    printf "dry run: working tree %.1f MiB + bundle %.1f MiB = %.1f MiB (limit %d MiB)\n",
           t / m, b / m, (t + b) / m, l }'
  if [ $(( ${tree:-0} + bundle )) -gt $(( limit_mib * 1048576 )) ]; then
    echo "dry run: working tree + bundle exceed $limit_mib MiB: the device tool would refuse them" >&2
    exit 1
  fi
else
  BUNDLE=$1
  OUT=$2
  if [ ! -f "$BUNDLE/manifest.json" ]; then
    echo "no bundle manifest in $BUNDLE (python -m cutedsl bundle --out DIR)" >&2; exit 2
  fi
fi
BUNDLE=$(cd "$BUNDLE" && pwd) || exit 2
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
export CUTEDSL_CACHE_DIR="$BUNDLE/cache"
ARGS=(--bundle "$BUNDLE" --out "$OUT" --python "$PY")
[ $DRY = 1 ] && ARGS+=(--dry-run)
[ -n "${STEPS:-}" ] && ARGS+=(--steps "$STEPS")
cd "$ROOT" && "$PY" -m cutedsl.bench.lease "${ARGS[@]}"
rc=$?
[ $DRY = 1 ] && echo "dry run: results in $OUT"
exit $rc
