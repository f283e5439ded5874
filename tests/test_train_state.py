"""The train state's init program: one compiled program at -O1 on CPU, bit for bit the -O2 init."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.loop import train_state
from lasp_jax.model.models import build_model
from tests.conftest import tiny_config


@pytest.mark.parametrize("model_overrides", [
    {},  # the R-MNIST net: PyTorch's uniform inits
    {"model.name": "resnet18", "model.width": 0.0625, "model.num_blocks": (1,)},  # normal (erfinv) + BatchNorm
], ids=["mnistnet", "resnet"])
def test_init_program_gives_the_bits_of_a_default_compiled_init(model_overrides):
  model = build_model(tiny_config(**model_overrides))
  tx = train_state.make_optimizer(momentum=0.9, weight_decay=5e-4)
  shape = (2, 28, 28, 1)
  state = train_state.create_train_state(model, tx, shape, seed=5)
  init_key, state_key = jax.random.split(jax.random.PRNGKey(5))
  # The reference: default compiler options, and a non-zero sample (the init must not read its values).
  ref = jax.jit(functools.partial(model.init, train=False))(init_key, jnp.ones(shape))
  assert jax.tree.structure(state.params) == jax.tree.structure(ref["params"])
  for got, want in zip(jax.tree.leaves((state.params, state.batch_stats)),
                       jax.tree.leaves((ref["params"], ref.get("batch_stats", {})))):
    np.testing.assert_array_equal(got, want)
  assert jax.tree.structure(state.opt_state) == jax.tree.structure(tx.init(ref["params"]))
  assert all(not np.any(x) for x in jax.tree.leaves(state.opt_state))  # zero momenta, learning rate 0
  np.testing.assert_array_equal(jax.random.key_data(state.rng), jax.random.key_data(state_key))
  assert int(state.step) == 0
