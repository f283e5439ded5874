"""XLA:CPU kernel choices (cpu_kernels.py) and the pooling written for XLA:CPU."""

import os
import re
import tempfile

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lasp_jax.loop import steps
from lasp_jax.model.conv import conv_for_backend
from lasp_jax.model.models import MnistNet, Model, ProjectionHead, ResNet, max_pool_2x2, window_max_pool_2x2
from lasp_jax.platform import cpu_kernels
from tests.conftest import Run, init, placed_chunk, randn, two_tasks

RESNET_KEEPS = ("INDIVIDUAL_DOT", "REDUCE")


def test_auto_is_resolved_per_net_and_backend():
  r, K = cpu_kernels.resolve, cpu_kernels.CpuKernels
  assert r("mnistnet", backend="cpu") == K(convs="xla", conv_backward="conv")
  assert r("resnet18", backend="cpu") == K(convs="xla", conv_backward="conv", ynn_keeps=RESNET_KEEPS)
  assert r("resnet18", "ynnpack", "matmul", backend="cpu") == K("ynnpack", "matmul", RESNET_KEEPS)
  assert r("mnistnet", "ynnpack", "matmul", backend="cpu") == K("ynnpack", "matmul")
  assert r("mnistnet", "xla", backend="gpu") == K(convs="ynnpack", conv_backward="xla")
  assert cpu_kernels.compiler_options(r("resnet18", "ynnpack", backend="cpu")) is None
  assert cpu_kernels.compiler_options(r("mnistnet", backend="cpu")) == {
      "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
  assert cpu_kernels.compiler_options(r("resnet18", backend="cpu")) == {
      "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"}


def _conv(x, w):
  return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _hlo(fn, options, *args):
  return jax.jit(fn, compiler_options=options).lower(*args).compile().as_text()


@pytest.mark.parametrize("net", ["mnistnet", "resnet18"])
def test_the_option_moves_convolutions_out_of_ynnpack(net):
  """What the docstring claims, read from the compiled program: a convolution, not a YNN fusion."""
  x, w = jnp.ones((4, 12, 12, 20)), jnp.ones((5, 5, 20, 50))
  options = cpu_kernels.compiler_options(cpu_kernels.resolve(net, backend="cpu"))
  assert "__ynn_fusion" in _hlo(_conv, None, x, w)
  xla = _hlo(_conv, options, x, w)
  assert " convolution(" in xla and "__ynn_fusion" not in xla


@pytest.mark.parametrize("net,ynn_reductions", [("mnistnet", False), ("resnet18", True)])
def test_resnet_keeps_ynnpack_reductions(net, ynn_reductions):
  """BatchNorm's statistics (a sum over N, H, W) stay a YNNPACK fusion only where REDUCE is kept."""
  x = randn(16, 16, 16, 32)
  options = cpu_kernels.compiler_options(cpu_kernels.resolve(net, backend="cpu"))
  assert ("__ynn_fusion" in _hlo(lambda x: jnp.sum(x, (0, 1, 2)), options, x)) == ynn_reductions


def test_both_kernel_choices_give_the_same_gradients():
  """The R-MNIST net's loss gradient under its auto choice (xla convs, conv grads) vs (ynnpack, matmul grads)."""
  x = randn(8, 28, 28, 1)
  grads = []
  for kernels in (cpu_kernels.resolve("mnistnet", backend="cpu"), cpu_kernels.CpuKernels("ynnpack", "matmul")):
    model = Model(MnistNet(conv_fn=conv_for_backend(kernels.conv_backward)), ProjectionHead(500, 16))
    params = init(model, x, seed=1)["params"]
    loss = lambda p, model=model: jnp.sum(jnp.sin(3 * model.apply({"params": p}, x)[1]))
    grads.append(jax.jit(jax.grad(loss), compiler_options=cpu_kernels.compiler_options(kernels))(params))
  for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max()))


def test_resnet_kernel_choices_give_the_same_gradients():
  """A small ResNet with BatchNorm: its auto choice (xla convs, conv grads, YNNPACK reductions) vs the defaults."""
  x = randn(6, 16, 16, 3)
  grads = []
  auto = cpu_kernels.resolve("resnet18", backend="cpu")
  for kernels in (auto, cpu_kernels.CpuKernels("ynnpack", "xla")):
    model = ResNet(num_blocks=(1, 1), widths=(8, 16), conv_fn=conv_for_backend(kernels.conv_backward))
    v = init(model, x, seed=1)
    loss = lambda p, model=model, v=v: jnp.sum(jnp.sin(3 * model.apply({"params": p, "batch_stats": v["batch_stats"]},
                                                                         x, mutable=["batch_stats"])[0]))
    grads.append(jax.jit(jax.grad(loss), compiler_options=cpu_kernels.compiler_options(kernels))(v["params"]))
  for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max()))


def test_max_pool_2x2_matches_flax_values_and_gradient():
  x = randn(3, 8, 6, 5)
  ref = lambda x: nn.max_pool(x, (2, 2), (2, 2))
  np.testing.assert_array_equal(max_pool_2x2(x), ref(x))
  g = lambda pool: jax.grad(lambda x: jnp.sum(jnp.sin(pool(x))))(x)
  np.testing.assert_array_equal(g(max_pool_2x2), g(ref))


def test_max_pool_2x2_ties_share_the_gradient_as_the_window_reduce_does():
  """Windows with 1-, 2-, 3- and 4-way ties: each tied input gets g / ties, bit for bit the reduce's gradient.

  The shipped R-MNIST runs were made with the pool as ``reshape + max`` (``window_max_pool_2x2``, a reduce, the
  eval forward's form); pairwise maxima's own autodiff would give a three-way tie 1/4, 1/4, 1/2 instead.
  """
  windows = np.array([[5., 1., 2., 3.], [4., 4., 0., 1.], [7., 7., 7., 2.], [3., 3., 3., 3.]], np.float32)
  # (1, 2, 8, 1): window k occupies columns 2k, 2k + 1 of both rows, read row by row.
  x = jnp.asarray(windows.reshape(4, 2, 2).transpose(1, 0, 2).reshape(1, 2, 8, 1))
  g = jnp.asarray([[[[3.], [6.], [9.], [12.]]]], jnp.float32)
  dx = jax.vjp(max_pool_2x2, x)[1](g)[0]
  per_window = np.asarray(dx).reshape(2, 4, 2).transpose(1, 0, 2).reshape(4, 4)
  np.testing.assert_array_equal(per_window, [[3, 0, 0, 0], [3, 3, 0, 0], [3, 3, 3, 0], [3, 3, 3, 3]])
  np.testing.assert_array_equal(max_pool_2x2(x), window_max_pool_2x2(x))
  np.testing.assert_array_equal(dx, jax.vjp(window_max_pool_2x2, x)[1](g)[0])
  ties = jnp.round(randn(4, 12, 12, 3))  # integer values: many ties of every kind
  gt = randn(4, 6, 6, 3)
  np.testing.assert_array_equal(jax.vjp(max_pool_2x2, ties)[1](gt)[0], jax.vjp(window_max_pool_2x2, ties)[1](gt)[0])


def test_train_chunk_has_only_canonical_convolutions():
  """The R-MNIST net's train chunk (a loop over its steps): every convolution NHWC/HWIO, none on XLA's slow loop.

  With JAX's own gradients (conv_backward=xla) this program's weight gradients compile to
  dim_labels=f01b_i01o->01bf and run ~20x slower (cpu_kernels.py); the auto choice must not.
  """
  # The tiny config's net (the R-MNIST net at a quarter of its width, the same kernel choices): the program of
  # test_train's 2-task Co2L run, from the compilation cache when that ran first.
  run = Run(two_tasks(method="co2l"), tempfile.mkdtemp())
  chunk, _ = placed_chunk(run)
  hlo = run.chunk_fn.lower(run.state, None, jnp.ones(run.config.model.embedding_dim, bool), run.data, chunk,
                           steps.pad_lrs([0.05], 1)).compile().as_text()
  labels = re.findall(r"dim_labels=([^,\s]+)", hlo)
  # conv2's forward and weight gradient; its input gradient is col2im and conv1 (one input channel) a matmul
  # (conv.py).
  assert len(labels) == 2, labels
  assert set(labels) == {"b01f_01io->b01f"}, labels


def test_the_command_line_adds_the_mlps_process_flags_but_never_one_already_named(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
  cpu_kernels.set_process_flags("mlp")
  assert os.environ["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2 --xla_cpu_use_fusion_emitters=false"
  cpu_kernels.set_process_flags("mlp")  # once only
  assert os.environ["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2 --xla_cpu_use_fusion_emitters=false"
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")  # the user's value wins
  cpu_kernels.set_process_flags("mlp")
  assert os.environ["XLA_FLAGS"] == "--xla_cpu_use_fusion_emitters=true"
  monkeypatch.delenv("XLA_FLAGS")
  for net in ("mnistnet", "resnet18"):  # the conv nets keep XLA's defaults
    cpu_kernels.set_process_flags(net)
    assert "XLA_FLAGS" not in os.environ
