"""Where a compiled train step's time goes on XLA:CPU, per HLO op kind, from a jax.profiler trace.

    python -m perf.profile_ops --net=resnet18 [--batch=32] [--steps_per_call=1] [--calls=2]
    python -m perf.profile_ops --net=mnistnet --batch=256 --steps_per_call=4

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
from absl import app, flags  # noqa: E402  (after XLA_FLAGS is set)

from perf import cpu_race  # noqa: E402  (after XLA_FLAGS is set)

_NET = flags.DEFINE_enum("net", "resnet18", list(cpu_race.NETS), "Which race net.")
_BATCH = flags.DEFINE_integer("batch", 32, "Samples per step (two views each).")
_SPC = flags.DEFINE_integer("steps_per_call", 1, "Steps per compiled chunk.")
_CALLS = flags.DEFINE_integer("calls", 2, "Traced calls after the warm-up call.")
_TOP = flags.DEFINE_integer("top", 25, "Op kinds printed.")


def op_times(trace_dir: str) -> tuple[collections.Counter, collections.Counter]:
  """Summed nanoseconds and counts per op kind, from the threads that run compiled programs.

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
          kind = re.sub(r"\.\d+$", "", ev.name)
          ns[kind] += ev.duration_ns
          count[kind] += 1
  return ns, count


def main(argv):
  del argv
  call = cpu_race.chunk_call(_NET.value, _BATCH.value, _SPC.value)
  call()
  trace_dir = tempfile.mkdtemp()
  with jax.profiler.trace(trace_dir):
    t = time.perf_counter()
    for _ in range(_CALLS.value):
      call()
    wall = (time.perf_counter() - t) / (_CALLS.value * _SPC.value)
  ns, count = op_times(trace_dir)
  steps_n = _CALLS.value * _SPC.value
  total = sum(ns.values()) / 1e6 / steps_n
  print(f"{_NET.value}, batch {_BATCH.value}: wall {1e3 * wall:.1f} ms per step; summed op time {total:.1f} ms "
        f"per step (two threads overlap; Eigen convolutions may show only their dispatch)")
  for kind, v in ns.most_common(_TOP.value):
    ms = v / 1e6 / steps_n
    print(f"{ms:9.1f} ms  {100 * ms / total:5.1f} %  {count[kind] // steps_n:5d}x  {kind}")


if __name__ == "__main__":
  app.run(main)
