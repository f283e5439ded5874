#!/usr/bin/env bash
# One-call benchmark on a lent GPU machine (see BENCHMARKS.md). Parts run in priority order,
# each in its own process under its own time limit, so one failure or overrun leaves the rest.
#   OUT=/some/dir bash experiments/gpu_bench.sh
# Missing pure-Python packages travel as wheels in .whl/ (ml-collections, mlxtend, tensorboardX).
set -u
OUT=${OUT:-/tmp/gpu_bench}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
log="$OUT/log.txt"
part() {  # part NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s) $(date +%T)" | tee -a "$log"
  local t0=$(date +%s)
  timeout "$limit" "$@" >>"$log" 2>&1; local rc=$?
  echo "=== $name rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$log"
}
{ nvidia-smi -L; python3 -c "import jax, flax, optax, orbax.checkpoint as o; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', o.__version__, jax.devices())"; } >>"$log" 2>&1
part core 200 python3 -m experiments.benchmark --only=step,search,eb,aug --repeats=5 --out="$OUT/core.json"
part projection_fp32 220 python3 -m experiments.benchmark --only=projection --out="$OUT/proj_fp32.json"
part torch 90 python3 -m experiments.torch_reference --out="$OUT/torch.json"
part task 100 python3 -m experiments.benchmark --only=task --out="$OUT/task.json"
part projection_bf16 200 python3 -m experiments.benchmark --only=projection --projection_dtype=bfloat16 --out="$OUT/proj_bf16.json"
grep -h -A12 "^device:" "$log" | grep -v "^===" || true
