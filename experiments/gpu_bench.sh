#!/usr/bin/env bash
# One-call benchmark on a lent GPU machine (see BENCHMARKS.md). Parts run in priority order,
# each in its own process under its own time limit, so one failure or overrun leaves the rest.
#   OUT=/some/dir bash experiments/gpu_bench.sh
# Missing pure-Python packages travel as wheels in .whl/ (ml-collections, mlxtend, tensorboardX).
set -u
OUT=${OUT:-/tmp/gpu_bench}
source "$(dirname "$0")/gpu_common.sh"
{ nvidia-smi -L; python3 -c "import jax, flax, optax, orbax.checkpoint as o; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', o.__version__, jax.devices())"; } >>"$log" 2>&1
part core 200 python3 -m experiments.benchmark --only=step,search,eb,aug --repeats=5 --out="$OUT/core.json"
part projection_fp32 220 python3 -m experiments.benchmark --only=projection --out="$OUT/proj_fp32.json"
part torch 90 python3 -m experiments.torch_reference --out="$OUT/torch.json"
part task 100 python3 -m experiments.benchmark --only=task --out="$OUT/task.json"
part projection_bf16 200 python3 -m experiments.benchmark --only=projection --projection_dtype=bfloat16 --out="$OUT/proj_bf16.json"
grep -h -A12 "^device:" "$log" | grep -v "^===" || true
