#!/usr/bin/env bash
# experiments.gpu_queue in one GPU call: the next missing paper-scale R-MNIST cells of results/rmnist_paper
# (the centred-head pair first, see the module's docstring), one after another (one run keeps an H200 busy: 3
# seeds vmapped took 3.7x one seed's time), with a shared compilation cache; the folder comes back as
# $OUT/rmnist_paper.tgz, the output in $OUT/log.txt. If no cell finished and time is left, the pinned
# flax/optax/chex/orbax in .whl2/ (if any) are put in front of the image's and the queue is run again.
#   OUT=/some/dir BUDGET=585 bash perf/gpu_queue.sh [more experiments.gpu_queue flags]
set -u
OUT=${OUT:-/tmp/gpu_queue}
BUDGET=${BUDGET:-585}
source "$(dirname "$0")/gpu_common.sh"
Q=${Q:-results/rmnist_paper}  # a copy for a CPU dry run
done_cells() { ls "$Q"/*/results.json 2>/dev/null | wc -l; }
queue() {
  echo "=== queue, budget $1 s, $(date +%T)" | tee -a "$log"
  python3 -m experiments.gpu_queue --out="$Q" --budget_s="$1" --scratch=/tmp/gpu_queue_scratch "${@:2}" >>"$log" 2>&1
  echo "=== queue rc=$?" | tee -a "$log"
}
nvidia-smi -L >>"$log" 2>&1
python3 -c "import jax, flax, optax, orbax.checkpoint as o; print('jax', jax.__version__, jax.devices(), 'flax',
flax.__version__, 'optax', optax.__version__, 'orbax', o.__version__)" >>"$log" 2>&1
before=$(done_cells)
queue "$(budget_left)" "$@"
if [ "$(done_cells)" = "$before" ] && (( $(budget_left) > 240 )) && ls .whl2/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site2 \
    .whl2/*.whl && export PYTHONPATH=/tmp/site2:${PYTHONPATH:-}
  queue "$(budget_left)" "$@"
fi
tar czf "$OUT/rmnist_paper.tgz" "$Q" 2>>"$log"
cat "$Q/table.md" 2>/dev/null
grep -h "rc=\|queue:\|error" "$log" || true
