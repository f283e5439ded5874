"""perf/profile_ops.py reads per-op times out of a jax.profiler trace."""

import jax
import jax.numpy as jnp

from perf import profile_ops


def test_op_times_finds_the_ops_of_a_traced_program(tmp_path):
  # Per program, the same switch profile_ops sets for the whole process before JAX starts.
  f = jax.jit(lambda x: jnp.sum(jnp.sin(x) * 2.0, axis=0), compiler_options={"xla_cpu_enable_xprof_traceme": True})
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
