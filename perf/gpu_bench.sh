#!/usr/bin/env bash
# One-call benchmark on a GPU machine (see BENCHMARKS.md). Parts run in priority order,
# each in its own process under its own time limit, so one failure or overrun leaves the rest.
#   OUT=/some/dir [BUDGET=560] [LASP_GOLDEN_DIR=.golden] bash perf/gpu_bench.sh
# Pure-Python packages a GPU image lacks can be put as wheels in .whl/ (ml-collections, mlxtend, tensorboardX).
# With LASP_GOLDEN_DIR set (a folder of golden files, e.g. held-out seeds), the precision-sensitive golden tests
# run on the GPU too (XLA:GPU's TF32 default once broke them; see BENCHMARKS.md).
# Measured on an H200: core 71 s / 145 s, torch 24 / 33 s, tests 136 s,
# projection 135 / 137 s (fp32), 131 / 129 s (bf16), task 30 / 31 s: all parts need about 10 minutes.
set -u
OUT=${OUT:-/tmp/gpu_bench}
source "$(dirname "$0")/gpu_common.sh"
{ nvidia-smi -L; python3 -c "import jax, flax, optax, orbax.checkpoint as o; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', o.__version__, jax.devices())"; } >>"$log" 2>&1
part core 200 python3 -m perf.benchmark --only=step,search,eb,aug --repeats=5 --out="$OUT/core.json"
part torch 90 python3 -m perf.torch_reference --out="$OUT/torch.json"
if [ -n "${LASP_GOLDEN_DIR:-}" ]; then
  part tests 180 python3 -m pytest -v -p no:cacheprovider tests/test_losses.py tests/test_mask_search.py \
    tests/test_salience.py tests/test_numerics.py tests/test_precision.py
fi
part projection_fp32 220 python3 -m perf.benchmark --only=projection --out="$OUT/proj_fp32.json"
part task 100 python3 -m perf.benchmark --only=task --out="$OUT/task.json"
part projection_bf16 200 python3 -m perf.benchmark --only=projection --projection_dtype=bfloat16 --out="$OUT/proj_bf16.json"
grep -h -A12 "^device:" "$log" | grep -v "^===" || true
