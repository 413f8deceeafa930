#!/usr/bin/env bash
# The GPU checks of issue 16, in one command for a lent GPU machine.
#
# Run from the repository root on a machine with one NVIDIA GPU and jax[cuda]
# (flax, optax and orbax-checkpoint) installed:
#
#   WHEELS=.whl OUT=/tmp/gpu_out bash benchmarks/gpu_checks.sh
#
# WHEELS (optional): a folder of wheels that the machine lacks (e.g. fiddle,
# libcst, tensorboardX), installed into a private folder first, without the
# network. OUT (default /tmp/gpu_checks): where `log` is written. Each check
# has its own time limit (seconds, BUDGET_* variables below) so that one slow
# check cannot starve the others; a 1.3B LM spends about 60 s before its first
# compile (imports, initialisation, tracing). In order:
#
# 1. the cuDNN fused attention's numerics against the plain layers, on the
#    GPU (`JAX_PLATFORMS=cuda`: the tests' conftest would pick the CPU);
# 2. `benchmarks/lm_mfu.py --size=1b --repeat`: steps/s, tokens/s, MFU, and
#    XLA's FLOP count of the lowered step against the model's;
# 3. the PGLE workflow (`--pgle_profile`) on the demo experiment: the profile
#    path and the XLA flags it logs, then a second run with those flags;
# 4. `benchmarks/fp8_gpu.py`: FP8 against bf16 step time and loss.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
log=$OUT/log
: > "$log"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}
BUDGET_TESTS=${BUDGET_TESTS:-120}
BUDGET_MFU=${BUDGET_MFU:-240}
BUDGET_PGLE=${BUDGET_PGLE:-150}
BUDGET_FP8=${BUDGET_FP8:-120}

if [[ -n "${WHEELS:-}" ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile \
      --target /tmp/gpu_checks_site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/gpu_checks_site:$PWD
else
  export PYTHONPATH=$PWD
fi

start=$(date +%s)
stamp() { echo "=== $(( $(date +%s) - start )) s: $*" | tee -a "$log"; }
quiet() { grep -v -E '^[WI][0-9]{4} ' ; }
check() {  # check SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2
  shift 2
  stamp "$what"
  timeout "$limit" "$@" 2>&1 | quiet | tee -a "$log"
  stamp "$what: exit ${PIPESTATUS[0]}"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv \
    2>&1 | tee -a "$log"
python3 -c 'import jax, flax, optax; print("jax", jax.__version__, "flax",
  flax.__version__, "optax", optax.__version__, jax.devices())' 2>&1 \
    | tee -a "$log"

check "$BUDGET_TESTS" 'cuDNN attention tests' \
    env JAX_PLATFORMS=cuda python3 -m pytest -q -o addopts= \
    praxis/layers/gpu_fast_attention_test.py
check "$BUDGET_MFU" 'lm_mfu --size=1b --repeat' \
    python3 benchmarks/lm_mfu.py --size=1b --repeat --steps=15 --warmup=2

job=$OUT/pgle_run1
check "$BUDGET_PGLE" 'PGLE profile run' \
    python3 -m paxml.main --exp=tasks.demo.pydoc_lm.PydocTransformerLmTest \
    --job_log_dir="$job" --pgle_profile
flags=$(cat "$job"/profile/plugins/profile/*/xla_flags.txt 2>/dev/null)
echo "PGLE flags: $flags" | tee -a "$log"
if [[ -n "$flags" ]]; then
  check "$BUDGET_PGLE" 'run with the PGLE profile' \
      env XLA_FLAGS="$flags" python3 -m paxml.main \
      --exp=tasks.demo.pydoc_lm.PydocTransformerLmTest --job_log_dir="$OUT/pgle_run2"
fi

check "$BUDGET_FP8" 'fp8_gpu' python3 benchmarks/fp8_gpu.py
stamp done
