"""The similarity matmuls, the mask search and EB are traced at full float32 precision.

On GPUs/TPUs a default-precision float32 matmul is TF32/bf16-pass (about 1e-3 relative
error), which a 0.01 temperature or the lr-100 search amplifies; on CPU nothing shows,
so these tests read the precision off the traced program.
"""

import jax
import jax.numpy as jnp
import pytest

from lasp_jax.method import losses, mask_search, salience
from lasp_jax.model.models import MnistNet, Model, ProjectionHead
from tests.conftest import init, rand, randn

HIGHEST = "precision=(Precision.HIGHEST, Precision.HIGHEST)"


def assert_all_highest(fn, *args, ops=("dot_general",)):
  text = str(jax.make_jaxpr(fn)(*args))
  count = 0
  for op in ops:
    for chunk in text.split(f"{op}[")[1:]:
      count += 1
      params = chunk.split("]\n")[0] if "]\n" in chunk else chunk[:600]
      assert HIGHEST in " ".join(params.split()), f"{op} without full precision: {params[:300]}"
  assert count > 0, "no matmul traced: the check would be vacuous"


@pytest.fixture(scope="module")
def z():
  return losses.l2_normalize(randn(8, 6))


def test_losses_and_their_gradients(z):
  labels, cur = jnp.array([0, 1, 0, 1]), jnp.array([True, True, False, True])
  supcon = lambda z: losses.supcon_loss(features=z, labels=labels, is_current=cur, temperature=0.5)
  ird = lambda z: losses.ird_loss(z_cur=z, z_past=z * 0.9, temp_cur=0.2, temp_past=0.01)
  sird = lambda z: losses.selective_ird_loss(z_cur=z, z_past=z, dim_mask=jnp.arange(6) < 3, temp_cur=0.2,
                                             temp_past=0.01)
  for fn in (supcon, ird, sird):
    assert_all_highest(jax.grad(fn), z)


def test_mask_search(z):
  assert_all_highest(lambda s0: mask_search.search_from(s0, z, jnp.arange(8) % 2, jnp.ones(8, bool),
                                                        num_classes=2, steps=3).s_final,
                     jnp.zeros((4, 6)))


def test_excitation_backprop():
  model = Model(MnistNet(width=0.125), ProjectionHead(16, 8, True))
  x = rand(2, 28, 28, 1, seed=1)
  variables = init(model, x, seed=2, train=False)
  assert_all_highest(lambda x: salience.excitation_backprop(model, variables, x, jnp.ones((2, 8)))[0], x,
                     ops=("dot_general", "conv_general_dilated"))


def test_the_check_fails_on_default_precision(z):
  with pytest.raises(AssertionError, match="without full precision"):
    assert_all_highest(lambda z: z @ z.T, z)


def test_mask_search_pieces_called_alone(z):
  labels, valid = jnp.arange(8) % 2, jnp.ones(8, bool)
  means = mask_search.class_means(z, labels, 2, valid)
  assert_all_highest(lambda f: mask_search.class_means(f, labels, 2, valid), z)
  assert_all_highest(jax.grad(lambda s: mask_search.search_loss(s, z, labels, means, valid, 1e-5)), jnp.zeros((3, 6)))
  assert_all_highest(lambda s: mask_search.ncm_predictions(s, z, means, 1), jnp.zeros((3, 6)))
