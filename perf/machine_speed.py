"""How fast this machine is today, in the three kinds of work the suite and a CPU run are made of.

    python -m perf.machine_speed [--out=FILE.json]

The same 2-core VM ran nearly the same suite in 502 s one day and 1,140 s another: a suite time (or any time in
BENCHMARKS.md) compares with another only beside these figures from the same hour. Each is the best of
``--repeats``:
- ``python_loop_s``: CPU seconds of a pure-Python loop of 10^7 additions (tracing, the host's Python work);
- ``matmul_gflops``: a 1,024 x 1,024 float32 matmul in numpy on one thread (the kernels' arithmetic);
- ``xla_compile_s``: XLA:CPU compiling a small convolutional train step from scratch, no cache (the suite's
  largest cost: LLVM code generation).
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import threadpoolctl
from absl import flags

from lasp_jax import errors, provenance
from lasp_jax.loop.checkpoint import write_json_atomic

_OUT = flags.DEFINE_string("out", "", "JSON output (optional).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Best of this many of each measurement.", lower_bound=1)
_LOOP = flags.DEFINE_integer("loop", 10**7, "Additions in the Python loop.", lower_bound=1)


def python_loop_s(n: int) -> float:
  t0 = time.process_time()
  s = 0
  for i in range(n):
    s += i
  return time.process_time() - t0


def matmul_gflops(n: int = 1024) -> float:
  a = np.random.default_rng(0).standard_normal((n, n), np.float32)
  with threadpoolctl.threadpool_limits(1):
    a @ a  # warm-up
    t0 = time.perf_counter()
    a @ a
    return 2 * n**3 / (time.perf_counter() - t0) / 1e9


def xla_compile_s(salt: int) -> float:
  """Seconds to compile a 3-convolution train step (loss and its gradient); ``salt`` makes each program new."""
  def loss(ws, x):
    for w in ws:
      x = jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
      x = (x - x.mean((0, 1, 2))) / (x.std((0, 1, 2)) + 1e-5)
    return jnp.mean(x**2) + salt

  ws = [jnp.ones((3, 3, c, 16), jnp.float32) for c in (1, 16, 16)]
  x = jnp.ones((8, 28, 28, 1), jnp.float32)
  lowered = jax.jit(jax.value_and_grad(loss)).lower(ws, x)
  t0 = time.perf_counter()
  lowered.compile()
  return time.perf_counter() - t0


def main(argv):
  del argv
  jax.config.update("jax_enable_compilation_cache", False)
  r = range(_REPEATS.value)
  out = {"python_loop_s": round(min(python_loop_s(_LOOP.value) for _ in r), 3), "loop": _LOOP.value,
         "matmul_gflops": round(max(matmul_gflops() for _ in r), 2),
         "xla_compile_s": round(min(xla_compile_s(k) for k in r), 3), "provenance": provenance.provenance()}
  print(f"python loop {out['python_loop_s']:.3f} s CPU ({out['loop']:,} additions), matmul "
        f"{out['matmul_gflops']:.2f} GFLOP/s (1 thread), XLA:CPU compile {out['xla_compile_s']:.3f} s "
        f"({out['provenance'].get('cpu', '')})")
  if _OUT.value:
    write_json_atomic(_OUT.value, out)


if __name__ == "__main__":
  errors.run_app(main)
