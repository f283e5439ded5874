"""How far a train step is from this machine's matmul rate: its FLOPs, counted from the traced program.

The CPU race (``perf/cpu_race.py``) reports samples/s; this module turns them into
GFLOP/s and into a ceiling: the samples/s a step would reach if every one of its FLOPs ran
at the rate of a large float32 matmul on this machine, measured in the same run. A target
ratio above ``ceiling / peer`` cannot be met by any implementation of the same arithmetic.

Only matmuls and convolutions are counted (``dot_general``, ``conv_general_dilated``: 2 FLOPs
per multiply-add); elementwise work, pooling and reductions are left out, so the ceiling is
generous. A convolution counts only the products of a kernel tap with a real input value,
not with its padding or the holes of an input dilation: JAX's input gradient of the R-MNIST
net's 5x5 VALID conv2 is a "full" correlation over a zero-padded 16x16 input, 2.25x the
products that matter (an implementation can skip them; conv.py's col2im does). So a
convolution's forward, input gradient and weight gradient each count the same. Loops: a
``scan``'s body counts ``length`` times, a ``while``'s body (a chunk's ``fori_loop`` over its
steps) once; a ``cond`` counts its dearest branch.
"""

from __future__ import annotations

import collections
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core


def _eqn_flops(eqn) -> float:
  name = eqn.primitive.name
  if name == "dot_general":
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    return 2.0 * float(np.prod(eqn.outvars[0].aval.shape)) * float(np.prod([lhs[d] for d in lhs_contract]))
  if name == "conv_general_dilated":
    return 2.0 * _conv_macs(eqn)
  return 0.0


def _taps(n: int, k: int, o: int, stride: int, pad_lo: int, lhs_dil: int, rhs_dil: int) -> int:
  """(output position, kernel tap) pairs of one spatial dim that meet a real input value."""
  x = np.arange(o)[:, None] * stride + np.arange(k)[None, :] * rhs_dil - pad_lo  # dilated-input index
  return int(np.sum((x >= 0) & (x <= (n - 1) * lhs_dil) & (x % lhs_dil == 0)))


def _conv_macs(eqn) -> float:
  p = eqn.params
  lhs, rhs, out = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape, eqn.outvars[0].aval.shape
  dn, nsp = p["dimension_numbers"], len(p["window_strides"])
  lhs_dil, rhs_dil = p["lhs_dilation"] or (1,) * nsp, p["rhs_dilation"] or (1,) * nsp
  taps = 1
  for i in range(nsp):
    taps *= _taps(lhs[dn.lhs_spec[2 + i]], rhs[dn.rhs_spec[2 + i]], out[dn.out_spec[2 + i]],
                  p["window_strides"][i], p["padding"][i][0], lhs_dil[i], rhs_dil[i])
  # Each output value sums its taps over the kernel's input features (per group).
  return float(out[dn.out_spec[0]]) * out[dn.out_spec[1]] * rhs[dn.rhs_spec[1]] * taps


def _sub_jaxprs(params):
  for value in params.values():
    for v in value if isinstance(value, (list, tuple)) else (value,):
      if isinstance(v, jax_core.ClosedJaxpr):
        yield v.jaxpr
      elif isinstance(v, jax_core.Jaxpr):
        yield v


def jaxpr_flops(jaxpr) -> float:
  """Matmul and convolution FLOPs of a (closed) jaxpr, nested programs included."""
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
  total = 0.0
  for eqn in jaxpr.eqns:
    inner = [jaxpr_flops(sub) for sub in _sub_jaxprs(eqn.params)]
    name = eqn.primitive.name
    if name == "cond":  # one branch runs: count the dearest
      total += max(inner)
    else:
      total += _eqn_flops(eqn) + (eqn.params["length"] if name == "scan" else 1) * sum(inner)
  return total


def matmul_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
  """The best rate of an n x n x n float32 matmul, jitted, over ``repeats`` timed calls."""
  a = jnp.ones((n, n), jnp.float32)
  return 2 * n ** 3 / best_seconds(jax.jit(jnp.matmul), (a, a), repeats) / 1e9


_TIMED = ("dot_general", "conv_general_dilated")


def matmul_ops(jaxpr) -> list:
  """The step's matmuls and convolutions: (eqn, how often) per distinct primitive, shapes and params."""
  found, first = collections.Counter(), {}

  def walk(jp):
    for eqn in getattr(jp, "jaxpr", jp).eqns:
      for sub in _sub_jaxprs(eqn.params):
        walk(sub)
      if eqn.primitive.name in _TIMED:
        key = (eqn.primitive.name, tuple(v.aval.shape for v in eqn.invars), repr(sorted(eqn.params.items())))
        found[key] += 1
        first.setdefault(key, eqn)
  walk(jaxpr)
  return [(first[k], n) for k, n in found.items()]


def _call_seconds(fn, args, repeats: int) -> tuple[float, list]:
  """Wall seconds of the first call of ``fn(*args)`` (compiling) and of each of the next ``repeats``."""
  times = []
  for _ in range(repeats + 1):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t)
  return times[0], times[1:]


def first_and_median_seconds(fn, args, repeats: int) -> tuple[float, float]:
  """Wall seconds of the first call of ``fn(*args)`` (compiling) and the median of the next ``repeats``."""
  first, times = _call_seconds(fn, args, repeats)
  return first, statistics.median(times)


def median_seconds(fn, args, repeats: int) -> float:
  """The median wall seconds of ``fn(*args)`` over ``repeats`` calls after one that compiles."""
  return first_and_median_seconds(fn, args, repeats)[1]


def best_seconds(fn, args, repeats: int) -> float:
  """The least wall seconds of ``fn(*args)`` over ``repeats`` calls after one that compiles."""
  return min(_call_seconds(fn, args, repeats)[1])


def stream_gbps(mb: int = 256, repeats: int = 10) -> float:
  """The best bytes per second of a streaming elementwise op (read once, write once) over ``mb`` MB.

  The best call, as for the matmul rate: the first calls page-fault their fresh 256 MB output (4 to 6 calls
  here, 9 GB/s against 25 once the freed pages are reused), and a median of five then read either.
  """
  x = jnp.ones((mb * 2 ** 20 // 4,), jnp.float32)
  return 2 * x.nbytes / best_seconds(jax.jit(lambda a: a * 1.5 + 0.5), (x,), repeats) / 1e9


def op_row(eqn, count: int, compiler_options, peak: float, bw: float, repeats: int) -> dict:
  """One op timed alone on random inputs of its shapes, with its FLOPs, least bytes moved and roofline bound
  (``peak`` GFLOP/s, ``bw`` GB/s)."""
  rng = np.random.default_rng(0)
  args = [jnp.asarray(rng.standard_normal(v.aval.shape).astype(v.aval.dtype)) for v in eqn.invars]
  fn = jax.jit(lambda *xs: eqn.primitive.bind(*xs, **eqn.params), compiler_options=compiler_options)
  seconds = median_seconds(fn, args, repeats)
  flop = _eqn_flops(eqn)
  nbytes = sum(a.nbytes for a in args) + sum(np.prod(v.aval.shape) * v.aval.dtype.itemsize for v in eqn.outvars)
  bound = max(flop / (peak * 1e9), nbytes / (bw * 1e9))
  return {"op": eqn.primitive.name, "shapes": " x ".join(str(tuple(v.aval.shape)) for v in eqn.invars),
          "out": str(tuple(eqn.outvars[0].aval.shape)), "count": count, "gflop": flop / 1e9,
          "mb": nbytes / 1e6, "flop_per_byte": flop / nbytes, "ms": seconds * 1e3,
          "gflops": flop / seconds / 1e9, "of_peak": flop / seconds / 1e9 / peak, "bound_ms": bound * 1e3,
          "of_bound": bound / seconds}
