"""Where a compiled train step's time goes on XLA:CPU, per HLO op kind, from a jax.profiler trace.

    python -m perf.profile_ops --net=resnet18 [--batch=32] [--steps_per_call=1] [--calls=2]
    python -m perf.profile_ops --net=mnistnet --batch=256 --steps_per_call=4
    python -m perf.profile_ops --net=mnistnet --batch=512 --bounds [--out=FILE.json]

It builds the race's train step (``perf/cpu_race.py``: the net's paper config
on random images, Co2L with the past model), compiles and warms it, then traces
``--calls`` calls with XLA:CPU's per-op trace events on
(``--xla_cpu_enable_xprof_traceme``, set here before JAX starts) and prints, per op
kind (the fusion's name without its number: ``multiply_reduce_fusion``,
``wrapped_reduce-window``, ``ynn_fusion``, ...), the time per step and the count.

Read it with care: ops on the two executor threads overlap, so shares are of the
summed op time, not of the wall time; and an XLA (Eigen) convolution's event may
cover only its dispatch while its work runs in the intra-op pool (seen for
ResNet-18: 201 ``conv_general_dilated`` events summing to ~80 ms; not for the
R-MNIST net, whose conv rows carry their time), so compare the rows with the wall time.
This found ResNet-18's BatchNorm statistics this way (``wrapped_reduce-window``:
60 % of the op time with YNNPACK's reductions turned off; see cpu_kernels.py).

``--bounds``: per instruction instead, each against its roofline bound max(FLOPs / matmul rate, bytes / stream
bandwidth), both measured in the run, with its bytes and FLOPs read from the compiled program (perf/hlo_cost.py:
operands and output once each, the least it can move); then the step's share of the matmul rate now and if every
instruction ran at its bound: the ceiling of this program, however well each kernel ran.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import tempfile
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()

import jax  # noqa: E402  (after XLA_FLAGS is set)
from absl import flags  # noqa: E402  (after XLA_FLAGS is set)

from lasp_jax import errors, provenance  # noqa: E402  (after XLA_FLAGS is set)
from lasp_jax.loop.checkpoint import write_json_atomic  # noqa: E402  (after XLA_FLAGS is set)
from perf import cpu_race, hlo_cost, roofline  # noqa: E402  (after XLA_FLAGS is set)

_NET = flags.DEFINE_enum("net", "resnet18", list(cpu_race.NETS), "Which race net.")
_BATCH = flags.DEFINE_integer("batch", 32, "Samples per step (two views each).", lower_bound=1)
_SPC = flags.DEFINE_integer("steps_per_call", 1, "Steps per compiled chunk.", lower_bound=1)
_CALLS = flags.DEFINE_integer("calls", 2, "Traced calls after the warm-up call.", lower_bound=1)
_TOP = flags.DEFINE_integer("top", 25, "Op kinds (with --bounds: instructions) printed.", lower_bound=1)
_BOUNDS = flags.DEFINE_bool("bounds", False, "Per instruction, against its roofline bound.")
_OUT = flags.DEFINE_string("out", "", "JSON output of --bounds (optional).")


def op_times(trace_dir: str, per_instruction: bool = False) -> tuple[collections.Counter, collections.Counter]:
  """Summed nanoseconds and counts per op kind (or per instruction), from the threads that run compiled programs.

  Those are XLA's intra-op pool (``tf_XLAEigen``) and the client thread that runs small
  programs inline (``tf_XLAPjRtCpuClient``); executor and thread-pool bookkeeping
  events and the zero-length ``end: ...`` markers are left out.
  """
  path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
  ns, count = collections.Counter(), collections.Counter()
  for plane in jax.profiler.ProfileData.from_file(path).planes:
    for line in plane.lines:
      if not line.name.startswith(("tf_XLAEigen", "tf_XLAPjRtCpuClient")):
        continue
      for ev in line.events:
        if not ev.name.startswith(("ThunkExecutor", "ThreadpoolListener", "end: ")):
          kind = ev.name if per_instruction else re.sub(r"\.\d+$", "", ev.name)
          ns[kind] += ev.duration_ns
          count[kind] += 1
  return ns, count


def traced(call, calls: int, steps_per_call: int, per_instruction: bool = False):
  """(wall seconds per step, summed ns per op kind or instruction, counts) over ``calls`` traced calls."""
  call()
  trace_dir = tempfile.mkdtemp()
  with jax.profiler.trace(trace_dir):
    t = time.perf_counter()
    for _ in range(calls):
      call()
    wall = (time.perf_counter() - t) / (calls * steps_per_call)
  return (wall, *op_times(trace_dir, per_instruction))


def bound_rows(ns, count, costs: dict, steps_n: int, peak: float, bw: float) -> list[dict]:
  """One row per instruction of the program: its traced time per step, bytes, FLOPs and roofline bound
  (an instruction the trace did not see counts once a step)."""
  rows = []
  for name, c in costs.items():
    per_step = count[name] / steps_n if name in count else 1.0
    rows.append({"name": name, "op": c.op, "shape": c.shape, "ms": ns.get(name, 0) / 1e6 / steps_n,
                 "mb": c.bytes / 1e6 * per_step, "gflop": c.flops / 1e9 * per_step,
                 "bound_ms": c.bound_ms(peak, bw) * per_step,
                 "matmul": c.flops > 0, "traced": name in count})
  return sorted(rows, key=lambda r: (-r["ms"], -r["bound_ms"]))


def print_bounds(net: str, batch: int, race) -> None:
  """``--bounds``: the race chunk's (``cpu_race.race_chunk``'s six values) instructions against their bounds."""
  ctx, carry, chunk, mask, lrs, past = race
  peak, bw = roofline.matmul_peak_gflops(), roofline.stream_gbps()
  wall, ns, count = traced(cpu_race.call_of(*race), _CALLS.value, _SPC.value, per_instruction=True)
  costs = hlo_cost.costs(ctx.chunk_fn.lower(carry.state, past, mask, carry.data, chunk, lrs).compile().as_text())
  steps_n = _CALLS.value * _SPC.value
  rows = bound_rows(ns, count, costs, steps_n, peak, bw)
  useful_ms = cpu_race.step_gflop(net, batch) / peak * 1e3  # the step's arithmetic at the matmul rate
  print(f"{net}, batch {batch}: wall {1e3 * wall:.1f} ms per step; matmul rate {peak:.1f} GFLOP/s, stream "
        f"{bw:.1f} GB/s")
  print(f"{'ms':>8}{'bound ms':>9}{'of bound':>9}{'MB':>8}{'GFLOP':>7}  instruction -> shape")
  for r in rows[:_TOP.value]:
    print(f"{r['ms']:8.2f}{r['bound_ms']:9.2f}{r['bound_ms'] / max(r['ms'], 1e-9):9.0%}{r['mb']:8.1f}"
          f"{r['gflop']:7.2f}  {r['name']} -> {r['shape']}")
  summary = {"net": net, "batch": batch, "wall_ms": wall * 1e3, "matmul_gflops": peak, "stream_gbps": bw,
             "useful_ms_at_matmul_rate": useful_ms}
  for part, keep in (("matmuls", True), ("rest", False), ("all", None)):
    sel = [r for r in rows if keep is None or r["matmul"] == keep]
    summary[part] = {"ms": sum(r["ms"] for r in sel), "bound_ms": sum(r["bound_ms"] for r in sel),
                     "mb": sum(r["mb"] for r in sel)}
    print(f"{part}: {summary[part]['ms']:.1f} ms of op time, {summary[part]['bound_ms']:.1f} ms at their bounds "
          f"({summary[part]['mb']:.0f} MB moved at least)")
  print("(op times: two threads overlap, and an Eigen convolution's event may hold only its dispatch; the wall "
        "time against the bounds' sum is the comparison that holds)")
  summary["share_now"] = useful_ms / (wall * 1e3)
  summary["share_at_bound"] = useful_ms / summary["all"]["bound_ms"]
  print(f"share of the matmul rate: now {summary['share_now']:.0%}; every instruction at its bound "
        f"{summary['share_at_bound']:.0%} (this program's ceiling)")
  if _OUT.value:
    write_json_atomic(_OUT.value, {"summary": summary, "rows": rows, "provenance": provenance.provenance()})


def main(argv):
  del argv
  race = cpu_race.race_chunk(_NET.value, _BATCH.value, _SPC.value)
  if _BOUNDS.value:
    return print_bounds(_NET.value, _BATCH.value, race)
  wall, ns, count = traced(cpu_race.call_of(*race), _CALLS.value, _SPC.value)
  steps_n = _CALLS.value * _SPC.value
  total = sum(ns.values()) / 1e6 / steps_n
  print(f"{_NET.value}, batch {_BATCH.value}: wall {1e3 * wall:.1f} ms per step; summed op time {total:.1f} ms "
        f"per step (two threads overlap; Eigen convolutions may show only their dispatch)")
  for kind, v in ns.most_common(_TOP.value):
    ms = v / 1e6 / steps_n
    print(f"{ms:9.1f} ms  {100 * ms / total:5.1f} %  {count[kind] // steps_n:5d}x  {kind}")


if __name__ == "__main__":
  errors.run_app(main)
