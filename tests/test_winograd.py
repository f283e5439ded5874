"""Winograd F(m x m, 3 x 3) convolutions: exact in float64, float32 error against the direct convolution
measured and bounded, gradients, routing, and a net built with the switch."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.model import models, winograd
from lasp_jax.model.conv import conv_grad_conv
from tests.conftest import init, tiny_config


def direct64(x, k):
  """The 3x3 SAME correlation in float64 numpy: nine shifted matmuls."""
  xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
  h, w = x.shape[1:3]
  return sum(xp[:, i:i + h, j:j + w] @ k[i, j].astype(np.float64) for i in range(3) for j in range(3))


def data(n, h, w, c, o, seed=0):
  rng = np.random.default_rng(seed)
  return rng.standard_normal((n, h, w, c)), rng.standard_normal((3, 3, c, o)) / np.sqrt(9 * c)


def test_transforms_reproduce_a_one_dimensional_correlation():
  """A^T [(G g) * (B^T d)] is the m outputs of the correlation of d (m + 2 values) with g (3), exactly."""
  rng = np.random.default_rng(0)
  for m, (bt, g, at) in winograd.TRANSFORMS.items():
    d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), np.correlate(d, k, "valid"), rtol=0, atol=1e-12)


# Odd sizes: the tiles cover an image padded up to a multiple of m and the output is cropped.
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape", [(2, 8, 8, 5, 3), (1, 7, 5, 4, 6), (3, 4, 4, 2, 2)])
def test_exact_in_float64(m, shape):
  x, k = data(*shape)
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(winograd.conv3x3, static_argnums=2)(jnp.asarray(x), jnp.asarray(k), m))
  np.testing.assert_allclose(got, direct64(x, k), rtol=0, atol=1e-12)


@pytest.mark.parametrize("m,bound", [(2, 3e-6), (4, 1e-5)])
def test_float32_error_and_gradients(m, bound):
  """Forward and both gradients in float32 against float64 references, the error relative to each array's largest
  value. Measured (Zen 3): F(2x2) 2e-7 / 2e-7 / 8e-7 (the direct convolution's: 4e-7 / 6e-7 / 5e-7), F(4x4)
  2.7e-6 / 2.5e-6 / 3.5e-6 (its transforms round more); the bounds leave room for any CPU's summation order."""
  x, k = data(4, 16, 16, 32, 24)
  dy = np.random.default_rng(1).standard_normal((4, 16, 16, 24))
  f = lambda a, b: winograd.conv3x3(a, b, m)
  y, vjp = jax.vjp(f, jnp.asarray(x, jnp.float32), jnp.asarray(k, jnp.float32))
  dx, dk = vjp(jnp.asarray(dy, jnp.float32))
  xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
  want = {"y": direct64(x, k),
          # dx: the full correlation of dy with the flipped kernel, channels swapped; dk: patches^T dy.
          "dx": direct64(dy, np.flip(k, (0, 1)).transpose(0, 1, 3, 2)),
          "dk": np.stack([np.stack([np.einsum("nhwc,nhwo->co", xp[:, i:i + 16, j:j + 16], dy) for j in range(3)])
                          for i in range(3)])}
  for name, got in (("y", y), ("dx", dx), ("dk", dk)):
    err = np.abs(np.asarray(got, np.float64) - want[name]).max() / np.abs(want[name]).max()
    assert err < bound, (name, err)


def test_routes_only_plain_3x3_stride1_convolutions():
  calls = []
  fallback = lambda *a, **kw: calls.append(a[1].shape[:3]) or jax.lax.conv_general_dilated(*a, **kw)
  conv = winograd.winograd_conv(4, fallback)
  x = jax.ShapeDtypeStruct((1, 8, 8, 16), jnp.float32)
  # Traced, not run: the routing happens at trace time (eager inits compiled one small program per op and shape).
  init = lambda layer, x: jax.eval_shape(layer.init, jax.random.PRNGKey(0), x)
  for kernel, stride, padding in (((3, 3), 2, 1), ((1, 1), 1, 0), ((3, 3), 1, 0)):
    init(nn.Conv(4, kernel, stride, padding=padding, conv_general_dilated=conv), x)
  init(nn.Conv(4, (3, 3), 1, padding=1, conv_general_dilated=conv), x.update(shape=(1, 8, 8, 3)))  # 3 channels
  assert calls == [(3, 3, 16), (1, 1, 16), (3, 3, 16), (3, 3, 3)]
  init(nn.Conv(4, (3, 3), 1, padding=1, conv_general_dilated=conv), x)
  assert len(calls) == 4  # this one took the Winograd path


def test_resnet_with_the_switch_matches_the_direct_net():
  """The same parameters through a ResNet whose 3x3 stride-1 convolutions are F(2x2): the loss and parameter
  gradients agree to float32 rounding."""
  # One stage of one block, 16 channels: the stem (3 channels) keeps the direct convolution, the block's two take
  # Winograd; a small compile. F(2x2): the routing is the same for both sizes, and winograd.conv3x3's F(4x4) is
  # checked on its own above (through the net its program compiled in 16 s against 8 s on the 2-core AMD EPYC).
  nets = {w: models.build_model(tiny_config(**{"model.name": "resnet18", "model.width": 0.25,
                                                "model.num_blocks": (1,), "model.winograd": w})) for w in (0, 2)}
  x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 8, 8, 3)), jnp.float32)
  v = init(nets[0], x)

  def loss(net, v):
    out, _ = net.apply(v, x, mutable=["batch_stats"])
    return jnp.sum(jnp.sin(out[1]))

  (l0, g0), (l2, g2) = (jax.jit(jax.value_and_grad(lambda v, n=nets[w]: loss(n, v)))(v) for w in (0, 2))
  np.testing.assert_allclose(l2, l0, rtol=1e-4)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max()), g2, g0)
  assert nets[0].encoder.conv_fn is conv_grad_conv and nets[2].encoder.conv_fn is not conv_grad_conv
