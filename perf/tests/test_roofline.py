"""perf/roofline.py counts a program's matmul and convolution FLOPs: hand values and invariants."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from lasp_jax.model import models
from perf import cpu_race, roofline


def flops(f, *args):
  return roofline.jaxpr_flops(jax.make_jaxpr(f)(*args))


def conv(x, k, strides=(1, 1), padding=((0, 0), (0, 0))):
  return lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))


def test_dot_and_valid_conv_hand_values():
  assert flops(jnp.dot, jnp.ones((3, 4)), jnp.ones((4, 5))) == 2 * 3 * 4 * 5
  # 2 images, 6x6 outputs, 4 output channels, 3x3 taps over 3 input channels.
  assert flops(conv, jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 4))) == 2 * (2 * 6 * 6 * 4) * (3 * 3 * 3)


def test_padded_conv_counts_only_taps_on_real_pixels():
  # 3x3 "SAME" on 4x4: corners see 4 real taps, edges 6, the inner 2x2 9: 4*4 + 8*6 + 4*9 = 100.
  same = lambda x, k: conv(x, k, (1, 1), ((1, 1), (1, 1)))
  assert flops(same, jnp.ones((1, 4, 4, 1)), jnp.ones((3, 3, 1, 1))) == 2 * 100


@pytest.mark.parametrize("strides,padding", [((1, 1), ((0, 0), (0, 0))), ((2, 2), ((1, 1), (1, 1))),
                                             ((1, 1), ((2, 2), (2, 2)))])
def test_a_convs_gradients_count_as_much_as_its_forward(strides, padding):
  """JAX's input gradient pads (and for strides dilates) the output gradient; only real products count."""
  x, k = jnp.ones((2, 9, 9, 3)), jnp.ones((5, 5, 3, 4))
  fwd = flops(lambda x, k: conv(x, k, strides, padding), x, k)
  loss = lambda x, k: conv(x, k, strides, padding).sum()
  assert flops(jax.grad(loss, argnums=1), x, k) == 2 * fwd  # forward + weight gradient
  assert flops(jax.grad(loss, argnums=(0, 1)), x, k) == 3 * fwd


def test_control_flow_scan_counts_its_length_a_while_its_body_once_a_cond_one_branch():
  a = jnp.ones((4, 4))
  one = 2 * 4 ** 3
  assert flops(lambda a: lax.scan(lambda c, _: (c @ a, None), a, None, length=3)[0], a) == 3 * one
  assert flops(lambda a, n: lax.fori_loop(0, n, lambda i, c: c @ a, a), a, 3) == one
  assert flops(lambda a, p: lax.cond(p, lambda: a @ a @ a, lambda: a @ a), a, True) == 2 * one


def test_rmnist_net_forward_hand_count():
  # conv1 24x24x20 outputs of 25 taps, conv2 8x8x50 of 25x20, fc 800->500, head 500->500->500.
  per_image = 2 * (24 * 24 * 20 * 25 + 8 * 8 * 50 * 500 + 800 * 500 + 500 * 500 + 500 * 500)
  net = models.Model(models.MnistNet(), models.ProjectionHead(500, 500))
  x = jnp.ones((3, 28, 28, 1))
  params = jax.eval_shape(net.init, jax.random.key(0), x)
  assert flops(net.apply, params, x) == 3 * per_image


def test_race_step_counts_each_part_once():
  """The R-MNIST race step: current model forward + backward, the past model's forward, the losses, the views.

  Fails if the step computes a forward twice or a gradient it does not need.
  """
  b = 8
  fwd = 2 * (24 * 24 * 20 * 25 + 8 * 8 * 50 * 500 + 800 * 500 + 500 * 500 + 500 * 500)
  conv1_dx = 2 * 24 * 24 * 20 * 25  # the images' gradient: not needed
  model = fwd + (2 * fwd - conv1_dx) + fwd  # current: forward, weight and input gradients; past: forward
  # (2b x 500) similarities: SupCon's forward and 2 gradients, IRD's current and past forward + 2 gradients.
  losses = 7 * 2 * (2 * b) ** 2 * 500
  views = 4 * 2 * 28 ** 3  # per image: 2 views x 2 resampling matmuls (rows, columns) of 28x28x28
  assert cpu_race.step_gflop("mnistnet", b) * 1e9 == pytest.approx(2 * b * model + losses + b * views, rel=1e-9)


def test_layer_roofline_finds_each_distinct_op_once_with_its_count_and_bound():
  """Two equal dots inside a loop body and one other: two rows, counts 2 and 1; a row's FLOPs, bytes and bound by
  hand (a 3x4 by 4x5 dot: 120 FLOPs; 12 + 20 + 15 floats moved)."""
  def f(a, b, c):
    body = lambda i, x: x + jnp.dot(a, b) + jnp.dot(a, b)
    return jax.lax.fori_loop(0, 3, body, jnp.zeros((3, 5))) @ c
  ops = roofline.matmul_ops(jax.make_jaxpr(f)(jnp.ones((3, 4)), jnp.ones((4, 5)), jnp.ones((5, 2))))
  assert sorted(n for _, n in ops) == [1, 2]
  eqn = next(e for e, n in ops if n == 2)
  row = roofline.op_row(eqn, 2, None, peak=1e-6, bw=1e-6, repeats=1)  # 1 kFLOP/s, 1 kB/s
  assert row["gflop"] * 1e9 == pytest.approx(120) and row["mb"] * 1e6 == pytest.approx(4 * (12 + 20 + 15))
  assert row["bound_ms"] == pytest.approx(max(120 / 1e3, 188 / 1e3) * 1e3)
