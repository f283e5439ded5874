"""The published runs' two-GPU DataParallel effects, by switch: model.bn_groups and lasp.eb_replicas."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax import config_lib
from lasp_jax.default_config import base_config
from lasp_jax.errors import ConfigError
from lasp_jax.eval import evaluators, probe
from lasp_jax.method import salience
from lasp_jax.model.models import GroupedBatchNorm, MnistNet, Model, ProjectionHead, build_model
from tests.conftest import init, randn, tiny_config


def _bn(x, mask=None):
  bn = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-5)
  v = init(bn, x)
  v = {"params": {"scale": jnp.linspace(0.5, 2, x.shape[-1]), "bias": jnp.linspace(-1, 1, x.shape[-1])},
       "batch_stats": v["batch_stats"]}
  y, upd = _apply(bn, v, x, mask)
  return v, y, upd["batch_stats"]


@functools.partial(jax.jit, static_argnums=0)  # one program per module and shape, not one per op
def _apply(module, v, x, mask=None):
  return module.apply(v, x, mask=mask, mutable=["batch_stats"])


@pytest.mark.parametrize("shape", [(8, 5, 5, 3), (8, 6)])
def test_grouped_bn_is_batch_norm_per_half_with_the_first_halfs_running_stats(shape):
  x = randn(*shape, seed=1) * 3 + 1
  v, _, _ = _bn(x)
  y, upd = _apply(GroupedBatchNorm(2), v, x)
  (_, y0, s0), (_, y1, _) = _bn(x[:4]), _bn(x[4:])
  np.testing.assert_allclose(y, jnp.concatenate([y0, y1]), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(upd["batch_stats"]["mean"], s0["mean"], rtol=1e-5, atol=1e-6)
  # nn.BatchNorm keeps the biased variance; GroupedBatchNorm the unbiased one, as PyTorch: x n / (n - 1).
  n = 4 * int(np.prod(shape[1:-1]))
  np.testing.assert_allclose(upd["batch_stats"]["var"], 0.9 + (s0["var"] - 0.9) * n / (n - 1), rtol=1e-5, atol=1e-6)
  assert jax.tree.structure(init(GroupedBatchNorm(2), x)) == jax.tree.structure(v)


def test_the_running_variance_is_pytorchs_unbiased_one():
  """Hand values: one channel, values 0, 1, 2, 3 (biased variance 1.25, unbiased 5/3); momentum 0.1 from 1."""
  x = jnp.arange(4.0).reshape(4, 1)
  v = init(GroupedBatchNorm(1), x)
  _, upd = GroupedBatchNorm(1).apply(v, x, mutable=["batch_stats"])
  np.testing.assert_allclose(upd["batch_stats"]["mean"], [0.1 * 1.5], rtol=1e-6)
  np.testing.assert_allclose(upd["batch_stats"]["var"], [0.9 + 0.1 * 5.0 / 3.0], rtol=1e-6)


def test_grouped_bn_leaves_masked_rows_out_of_each_groups_statistics():
  x = randn(8, 4, 4, 3, seed=2)
  mask = jnp.array([1, 1, 1, 0, 1, 1, 0, 0], bool)
  v, _, _ = _bn(x)
  y, _ = _apply(GroupedBatchNorm(2), v, x, mask[:, None, None, None])
  _, y0, _ = _bn(x[:3])
  _, y1, _ = _bn(x[4:6])
  np.testing.assert_allclose(y[:3], y0, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(y[4:6], y1, rtol=1e-5, atol=1e-5)


def test_bn_groups_change_the_train_forward_but_not_eval():
  x = randn(8, 28, 28, 1, seed=3)
  outs = {}
  for g in (1, 2):
    m = Model(MnistNet(width=0.25, batch_norm=True, bn_groups=g), ProjectionHead(125, 8))
    v = init(m, x, train=False)
    # Jitted: op by op each apply compiled a program per op and shape.
    train_fwd = jax.jit(lambda v, x, m=m: m.apply(v, x, train=True, mutable=["batch_stats"])[0][1])
    outs[g] = (train_fwd(v, x), jax.jit(functools.partial(m.apply, train=False))(v, x)[1])
  assert not np.allclose(outs[1][0], outs[2][0], atol=1e-3)
  np.testing.assert_array_equal(outs[1][1], outs[2][1])


def test_eb_replicas_sum_the_square_roots_of_each_chunk_for_the_encoder_only():
  """The published DataParallel wrapped model.encoder only: encoder gamma = sqrt(G1) + sqrt(G2) over the two
  halves, the head's gamma that of the gathered batch (sqrt(G1 + G2))."""
  m = Model(MnistNet(width=0.25), ProjectionHead(125, 8))
  x = randn(6, 28, 28, 1, seed=4)
  v = init(m, x, train=False)
  p = jnp.abs(randn(6, 8, seed=5))
  # Jitted: op by op, EB compiled ~300 single-op programs here (15.8 s; ~70 ms each on the 2-core CPU).
  eb = jax.jit(lambda xx, pp, replicas=1: salience.excitation_backprop(m, v, xx, pp, replicas=replicas),
               static_argnames="replicas")
  g2, px2 = eb(x, p, replicas=2)
  (ga, pxa), (gb, pxb) = eb(x[:3], p[:3]), eb(x[3:], p[3:])
  g1, _ = eb(x, p)
  for a, b, c in zip(*[jax.tree.leaves(g["encoder"]) for g in (g2, ga, gb)]):
    np.testing.assert_allclose(a, b + c, rtol=1e-5, atol=1e-7)
  for a, one in zip(*[jax.tree.leaves(g["head"]) for g in (g2, g1)]):
    np.testing.assert_allclose(a, one, rtol=1e-5, atol=1e-7)
  k = lambda g: g["encoder"]["conv2"]["kernel"]
  assert float(jnp.sum(k(g2))) > float(jnp.sum(k(g1))) * 1.05  # sqrt(a) + sqrt(b) > sqrt(a + b)
  h = lambda g: g["head"]["fc1"]["kernel"]
  assert float(jnp.sum(h(ga) + h(gb))) > float(jnp.sum(h(g2))) * 1.05  # the head was not split
  np.testing.assert_allclose(px2, jnp.concatenate([pxa, pxb]), rtol=1e-5, atol=1e-7)


def test_the_published_preset_sets_both_and_batches_must_split():
  c = config_lib.resolved(config_lib.override(base_config(), preset="published"))
  assert c.model.bn_groups == 2 and c.lasp.eb_replicas == 2
  bad = config_lib.override(base_config(), **{"model.bn_groups": 3, "train.batch_size": 64})
  with pytest.raises(ConfigError, match="bn_groups"):
    config_lib.validate(bad)


def test_configs_recorded_before_the_switches_existed_still_match():
  c = base_config()
  old = {k: v for k, v in config_lib.flat(c).items() if k not in config_lib.LATER_KEYS}
  assert config_lib.differing_keys(old, config_lib.flat(c)) == []
  assert config_lib.config_hash(c) == config_lib.config_hash(config_lib.override(c, **{"lasp.eb_replicas": 1}))
  assert config_lib.config_hash(c) != config_lib.config_hash(config_lib.override(c, **{"lasp.eb_replicas": 2}))


def test_the_published_probe_decays_at_absolute_epochs():
  """main_linear_buffer*.py decays at epochs 60, 75 and 90 whatever the epoch count: a 5-epoch published probe
  never decays, lasp_jax's default (fractions of the epochs) does."""
  published = config_lib.resolved(config_lib.override(base_config(), preset="published", **{"eval.epochs": 5}))
  np.testing.assert_allclose(probe._lr_per_epoch(evaluators.probe_config(published)), [1.0] * 5)
  default = config_lib.resolved(config_lib.override(base_config(), **{"eval.epochs": 5}))
  np.testing.assert_allclose(probe._lr_per_epoch(evaluators.probe_config(default)), [1, 1, 1, 0.2, 0.04 * 0.2])
  hundred = config_lib.resolved(config_lib.override(base_config(), preset="published"))
  lrs = probe._lr_per_epoch(evaluators.probe_config(hundred))
  assert lrs[59] == 1.0 and lrs[60] == pytest.approx(0.2) and lrs[90] == pytest.approx(0.008)


@pytest.mark.parametrize("scenario,method,expected", [("domain", "sd", "onlypast"), ("domain", "sd_gm", "onlycurrent"),
                                                      ("domain", "gm", "onlycurrent"), ("class", "sd", "onlycurrent")])
def test_the_published_preset_searches_where_the_published_commands_did(scenario, method, expected):
  c = config_lib.override(base_config(), preset="published", method=method,
                          **{"data.scenario": scenario, "lasp.srs_data": "combined"})
  assert config_lib.resolved(c).lasp.srs_data == expected


def test_the_published_preset_sets_every_key_over_explicit_values():
  c = config_lib.override(base_config(), preset="published", **{"eval.every_task": True, "model.bn_groups": 1,
                                                                "eval.select_best_on_test": False})
  flat = config_lib.flat(config_lib.resolved(c))
  for key, value in config_lib.PUBLISHED_PRESET.items():
    assert flat[key] == (list(value) if isinstance(value, tuple) else value), key


def test_a_model_built_from_the_config_honours_bn_groups():
  x = jnp.concatenate([randn(4, 28, 28, 1, seed=1), 3.0 + randn(4, 28, 28, 1, seed=2)])  # two views, unlike
  outs = {}
  for groups in (1, 2):
    m = build_model(config_lib.resolved(tiny_config(**{"model.bn_groups": groups})))
    v = init(m, x, train=False)
    apply = jax.jit(m.apply, static_argnames=("train", "mutable"))  # one program each, not op by op
    outs[groups] = apply(v, x, train=True, mutable=("batch_stats",))[0][0]
    # eval mode uses the running statistics: the groups change nothing there
    outs[groups, "eval"] = apply(v, x, train=False)[0]
  assert float(jnp.max(jnp.abs(outs[1] - outs[2]))) > 1e-2
  np.testing.assert_allclose(outs[1, "eval"], outs[2, "eval"], rtol=1e-6)
