"""The custom-gradient convolutions (im2col; forward-convolution) equal XLA's, values and gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.conv import conv_for_backend, conv_grad_conv, matmul_grad_conv


@pytest.mark.parametrize("conv_fn", [matmul_grad_conv, conv_grad_conv], ids=["matmul", "conv"])
@pytest.mark.parametrize("stride,padding,size", [(1, 1, 3), (2, 1, 3), (2, 0, 1), (1, ((0, 0), (0, 0)), 5),
                                                 (1, ((2, 0), (1, 2)), 3), (1, 0, 1)])
def test_matches_xla_convolution(stride, padding, size, conv_fn):
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 12, 12, 4))
  plain = nn.Conv(8, (size, size), stride, padding=padding, use_bias=False)
  ours = plain.clone(conv_general_dilated=conv_fn)
  v = plain.init(jax.random.PRNGKey(1), x)
  grads = lambda m: jax.grad(lambda v, x: jnp.sum(jnp.sin(m.apply(v, x))), (0, 1))(v, x)
  np.testing.assert_allclose(ours.apply(v, x), plain.apply(v, x), rtol=1e-5, atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4), grads(ours), grads(plain))


def test_backend_choice():
  assert conv_for_backend("xla") is None
  assert conv_for_backend("matmul") is matmul_grad_conv
  assert conv_for_backend("conv") is conv_grad_conv
  for unresolved in ("cudnn", "auto"):  # auto is cpu_kernels.resolve's to resolve, per net
    with pytest.raises(ValueError, match="conv_backward"):
      conv_for_backend(unresolved)
