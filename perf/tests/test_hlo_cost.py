"""perf/hlo_cost.py reads bytes and FLOPs of a compiled program's instructions: hand values."""

import jax
import jax.numpy as jnp
from jax import lax

from perf import hlo_cost


def costs(f, *args):
  return hlo_cost.costs(jax.jit(f).lower(*args).compile().as_text())


def test_a_matmul_counts_its_flops_and_an_elementwise_op_its_bytes():
  # (a @ b) * 2: however XLA fuses it, the program's FLOPs are the dot's, 2 * 64 * 32 * 16.
  c = costs(lambda a, b: (a @ b) * 2.0, jnp.ones((64, 32)), jnp.ones((32, 16)))
  assert sum(v.flops for v in c.values()) == 2 * 64 * 32 * 16
  # x * 2 + 1 over 1,000 floats: one loop reads 4,000 bytes and writes 4,000, and runs no matmul.
  c = costs(lambda x: x * 2.0 + 1.0, jnp.ones((1000,)))
  assert [(v.bytes, v.flops) for v in c.values()] == [(8000, 0.0)]


def test_a_convolution_counts_every_kernel_tap_per_output():
  conv = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
  c = costs(conv, jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 4)))
  # 2 images, 6x6 outputs, 4 channels, each 3x3 taps over 3 input channels.
  assert sum(v.flops for v in c.values()) == 2 * (2 * 6 * 6 * 4) * (3 * 3 * 3)


def test_a_loop_body_s_instructions_count_once_each():
  """A while loop's body is unfused: its instructions are the trace's events, the loop itself moves nothing."""
  def f(x):
    return lax.fori_loop(0, 3, lambda i, y: jnp.tanh(y) * 2.0, x)
  c = costs(f, jnp.ones((256,)))
  tanh = [v for v in c.values() if v.flops == 0 and v.bytes == 2 * 256 * 4]
  assert tanh and all(v.op != "while" for v in c.values())
