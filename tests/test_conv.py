"""The custom-gradient convolutions (im2col; forward-convolution) equal XLA's, values and gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.model.conv import conv_for_backend, conv_grad_conv, matmul_grad_conv
from tests.conftest import init, randn

# (stride, padding, kernel size) on 12x12 images. Stride-1 cases 3 and 6 make conv_grad_conv's input gradient a
# matmul and col2im (input area / output area 2.25, case 6 with uneven padding).
CASES = [(1, 1, 3), (2, 1, 3), (2, 0, 1), (1, ((0, 0), (0, 0)), 5), (1, ((2, 0), (1, 2)), 3), (1, 0, 1),
         (1, ((2, 0), (0, 2)), 7)]


# Four input channels through every path; one channel at stride 1 through conv_grad_conv's row-Toeplitz matmul.
@pytest.mark.parametrize("conv_fn,stride,padding,size,channels",
                         [pytest.param(f, *case, 4, id=f"{name}-{i}-c4")
                          for name, f in (("matmul", matmul_grad_conv), ("conv", conv_grad_conv))
                          for i, case in enumerate(CASES)]
                         + [pytest.param(conv_grad_conv, *case, 1, id=f"conv-{i}-c1")
                            for i, case in enumerate(CASES) if case[0] == 1])
def test_matches_xla_convolution(stride, padding, size, conv_fn, channels):
  x = randn(3, 12, 12, channels)
  plain = nn.Conv(8, (size, size), stride, padding=padding, use_bias=False)
  ours = plain.clone(conv_general_dilated=conv_fn)
  v = init(plain, x, seed=1)
  # Jitted: op by op, each of the im2col path's pads and slices would compile a program of its own.
  grads = lambda m: jax.jit(jax.grad(lambda v, x: jnp.sum(jnp.sin(m.apply(v, x))), (0, 1)))(v, x)
  np.testing.assert_allclose(jax.jit(ours.apply)(v, x), jax.jit(plain.apply)(v, x), rtol=1e-5, atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4), grads(ours), grads(plain))


def test_backend_choice():
  assert conv_for_backend("xla") is None
  assert conv_for_backend("matmul") is matmul_grad_conv
  assert conv_for_backend("conv") is conv_grad_conv
  for unresolved in ("cudnn", "auto"):  # auto is cpu_kernels.resolve's to resolve, per net
    with pytest.raises(ValueError, match="conv_backward"):
      conv_for_backend(unresolved)


@pytest.mark.parametrize("width", [28, 13])  # output width 24: tiles of 8; 9: tiles of 3
def test_one_channel_conv_is_a_matmul_within_float32_rounding_of_float64(width):
  """conv1 of the R-MNIST net (5x5, 1 -> 20) under conv_grad_conv: no convolution in its program, values and
  kernel gradient within float32 rounding of a float64 im2col computation."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((16, 28, width, 1)).astype(np.float32)
  k = (0.2 * rng.standard_normal((5, 5, 1, 20))).astype(np.float32)
  dy = rng.standard_normal((16, 24, width - 4, 20)).astype(np.float32)
  conv = lambda k: conv_grad_conv(jnp.asarray(x), k, (1, 1), ((0, 0), (0, 0)))
  assert "convolution(" not in jax.jit(conv).lower(jnp.asarray(k)).as_text(dialect="hlo")
  y, vjp = jax.vjp(conv, jnp.asarray(k))
  cols = np.stack([x[:, i:i + 24, j:j + width - 4, 0] for i in range(5) for j in range(5)], -1).astype(np.float64)
  y64 = cols @ k.reshape(25, 20).astype(np.float64)
  dk64 = np.einsum("nhwp,nhwo->po", cols, dy.astype(np.float64)).reshape(k.shape)
  np.testing.assert_allclose(y, y64, rtol=0, atol=1e-6 * np.abs(y64).max())
  np.testing.assert_allclose(vjp(jnp.asarray(dy))[0], dk64, rtol=0, atol=1e-6 * np.abs(dk64).max())


def test_wasteful_input_gradient_is_col2im_within_float32_rounding_of_float64():
  """conv2 of the R-MNIST net (5x5 VALID, 12x12 -> 8x8, 20 -> 50): its full correlation would do 2.25x the
  convolution's work, so conv_grad_conv's input gradient is a matmul and col2im (no convolution in the
  program of dx alone), within float32 rounding of a float64 scatter of dy @ k^T."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((8, 12, 12, 20)).astype(np.float32)
  k = (0.05 * rng.standard_normal((5, 5, 20, 50))).astype(np.float32)
  dy = rng.standard_normal((8, 8, 8, 50)).astype(np.float32)
  dx_fn = lambda x, dy: jax.vjp(lambda x: conv_grad_conv(x, jnp.asarray(k), (1, 1), ((0, 0), (0, 0))), x)[1](dy)[0]
  assert "convolution(" not in jax.jit(dx_fn).lower(jnp.asarray(x), jnp.asarray(dy)).as_text(dialect="hlo")
  dx64 = np.zeros(x.shape)
  for i in range(5):
    for j in range(5):
      dx64[:, i:i + 8, j:j + 8, :] += dy.astype(np.float64) @ k[i, j].T.astype(np.float64)
  got = jax.jit(dx_fn)(jnp.asarray(x), jnp.asarray(dy))
  np.testing.assert_allclose(got, dx64, rtol=0, atol=1e-6 * np.abs(dx64).max())
