# Sourced by the one-call GPU scripts (gpu_bench.sh, gpu_rmnist.sh) after they set OUT: installs the wheels in
# .whl/ if there are any (for a GPU image without some pure-Python packages), unbuffered output into $OUT/log.txt, and `part NAME SECONDS CMD...`, which runs one part
# in its own process under its own limit so that a failure or an overrun leaves the other parts' results;
# BUDGET (seconds from the script's start, T0) caps the parts' limits so that the call ends inside its time limit.
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
log="$OUT/log.txt"
T0=${T0:-$(date +%s)}
budget_left() { echo $(( BUDGET - ($(date +%s) - T0) - 15 )); }  # seconds of BUDGET left, 15 kept to pack up
part() {  # part NAME SECONDS CMD...; with BUDGET set, the limit shrinks to what is left of it
  local name=$1 limit=$2; shift 2
  if [ -n "${BUDGET:-}" ]; then
    local left=$(budget_left)
    (( left < limit )) && limit=$left
    (( limit < 20 )) && { echo "=== $name skipped (${left}s left)" | tee -a "$log"; return; }
  fi
  echo "=== $name (limit ${limit}s) $(date +%T)" | tee -a "$log"
  local t0=$(date +%s)
  timeout "$limit" "$@" >>"$log" 2>&1; local rc=$?
  echo "=== $name rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$log"
}
