"""XLA:CPU kernel choices (cpu_kernels.py) and the pooling written for XLA:CPU."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lasp_jax import cpu_kernels
from lasp_jax.conv import conv_for_backend
from lasp_jax.models import ContrastiveModel, MnistNet, ProjectionHead, max_pool_2x2


def test_auto_is_resolved_per_net_and_backend():
  r = cpu_kernels.resolve
  assert r("mnistnet", backend="cpu") == cpu_kernels.CpuKernels(convs="xla", conv_backward="xla")
  assert r("resnet18", backend="cpu") == cpu_kernels.CpuKernels(convs="ynnpack", conv_backward="matmul")
  assert r("mnistnet", "ynnpack", "matmul", backend="cpu") == cpu_kernels.CpuKernels("ynnpack", "matmul")
  assert r("mnistnet", "xla", backend="gpu") == cpu_kernels.CpuKernels(convs="ynnpack", conv_backward="xla")
  assert cpu_kernels.compiler_options(r("resnet18", backend="cpu")) is None
  assert cpu_kernels.compiler_options(r("mnistnet", backend="cpu")) == cpu_kernels.XLA_CONV_OPTIONS


def _conv(x, w):
  return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def test_the_option_moves_convolutions_out_of_ynnpack():
  """What the docstring claims, read from the compiled program: a convolution, not a YNN fusion."""
  x, w = jnp.ones((4, 12, 12, 20)), jnp.ones((5, 5, 20, 50))
  hlo = lambda options: jax.jit(_conv, compiler_options=options).lower(x, w).compile().as_text()
  default, xla = hlo(None), hlo(cpu_kernels.XLA_CONV_OPTIONS)
  assert "__ynn_fusion" in default
  assert " convolution(" in xla and "__ynn_fusion" not in xla


def test_both_kernel_choices_give_the_same_gradients():
  """The R-MNIST net's loss gradient under (xla convs, xla grads) vs (ynnpack, matmul grads)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (8, 28, 28, 1))
  grads = []
  for kernels in (cpu_kernels.CpuKernels("xla", "xla"), cpu_kernels.CpuKernels("ynnpack", "matmul")):
    model = ContrastiveModel(MnistNet(conv_fn=conv_for_backend(kernels.conv_backward)), ProjectionHead(500, 16))
    params = model.init(jax.random.PRNGKey(1), x)["params"]
    loss = lambda p: jnp.sum(jnp.sin(3 * model.apply({"params": p}, x)[1]))
    grads.append(jax.jit(jax.grad(loss), compiler_options=cpu_kernels.compiler_options(kernels))(params))
  for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max()))


def test_max_pool_2x2_matches_flax_values_and_gradient():
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 8, 6, 5))
  ref = lambda x: nn.max_pool(x, (2, 2), (2, 2))
  np.testing.assert_array_equal(max_pool_2x2(x), ref(x))
  g = lambda pool: jax.grad(lambda x: jnp.sum(jnp.sin(pool(x))))(x)
  np.testing.assert_array_equal(g(max_pool_2x2), g(ref))
