"""perf/profile_ops.py reads per-op times out of a jax.profiler trace."""

import jax
import jax.numpy as jnp

from perf import hlo_cost, profile_ops


def test_op_times_finds_the_ops_of_a_traced_program(tmp_path):
  # Per program, the same switch profile_ops sets for the whole process before JAX starts; and XLA's fusion emitters,
  # which the suite's workers turn off (tests/conftest.py), as profile_ops meets them (their kernels name the ops).
  f = jax.jit(lambda x: jnp.sum(jnp.sin(x) * 2.0, axis=0),
              compiler_options={"xla_cpu_enable_xprof_traceme": True, "xla_cpu_use_fusion_emitters": True})
  x = jnp.ones((512, 256))
  jax.block_until_ready(f(x))
  with jax.profiler.trace(str(tmp_path)):
    for _ in range(3):
      jax.block_until_ready(f(x))
  ns, count = profile_ops.op_times(str(tmp_path))
  assert ns and all(v > 0 for v in ns.values())
  sine = [k for k in ns if "sine" in k]  # the sin op (alone or inside a fusion)
  assert len(sine) == 1 and count[sine[0]] == 3  # once per traced call
  assert not any(k.startswith(("ThunkExecutor", "ThreadpoolListener", "end: ")) for k in ns)  # not ops


def test_bound_rows_hand_values():
  """Each instruction's bound is max(FLOPs / rate, bytes / bandwidth), per step; one the trace missed counts once."""
  costs = {"copy_fusion": hlo_cost.Cost("fusion", bytes=10 ** 9, flops=0.0, shape="f32[1]"),
           "dot": hlo_cost.Cost("dot", bytes=10 ** 6, flops=2e12, shape="f32[1]")}
  # Two traced steps: the copy ran twice (1 s in all); the dot left no event.
  rows = {r["name"]: r for r in profile_ops.bound_rows({"copy_fusion": 10 ** 9}, {"copy_fusion": 2}, costs,
                                                       steps_n=2, peak=1000.0, bw=10.0)}
  assert rows["copy_fusion"]["ms"] == 500.0 and rows["copy_fusion"]["bound_ms"] == 100.0  # 1 GB at 10 GB/s
  assert rows["dot"]["ms"] == 0.0 and rows["dot"]["bound_ms"] == 2000.0  # 2 TFLOP at 1 TFLOP/s, bytes negligible
  assert rows["dot"]["matmul"] and not rows["dot"]["traced"] and not rows["copy_fusion"]["matmul"]
