"""NCMC mask search: goldens, the naive oracle, batched = independent restarts."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.method import mask_search as ms
from lasp_jax.method.losses import l2_normalize
from tests.conftest import golden_params, randn

F32 = np.float32


def naive_sims(s, feats, means):
  """Oracle: the K x M x C cosine tensor, restart by restart (full precision on any backend)."""
  def one(sk):
    m = jax.nn.sigmoid(sk)
    return jnp.matmul(l2_normalize(feats * m), l2_normalize(means * m).T, precision="highest")
  return jax.vmap(one)(s)


def _inputs(g):
  feats = jnp.asarray(g["feats"], F32)
  labels = jnp.asarray(g["labels"], jnp.int32)
  valid = jnp.ones(labels.shape, bool)
  means = ms.class_means(feats, labels, int(g["num_classes"]), valid)
  return feats, labels, valid, means


@golden_params("ncmc")
def test_values_at_s0(golden):
  g = golden
  feats, labels, valid, means = _inputs(g)
  s0 = jnp.asarray(g["s0"], F32)
  np.testing.assert_allclose(means, g["class_means"], atol=1e-6)
  np.testing.assert_allclose(naive_sims(s0, feats, means), g["sims_s0"], atol=1e-6)
  # Compiled, as the search runs them (called op by op they compiled 125 small programs).
  objective = jax.jit(ms.objective, static_argnums=5)
  loss_and_grad = jax.jit(jax.value_and_grad(ms.search_loss), static_argnums=6)
  for kind, obj_key, loss_key, grad_key in [
      ("published_all_pairs", "obj_sim_code_s0", "loss_code_s0", "grad_loss_code_s0"),
      ("own_class", "obj_sim_ownclass_s0", "loss_ownclass_s0", "grad_loss_ownclass_s0")]:
    np.testing.assert_allclose(objective(s0, feats, labels, means, valid, kind), g[obj_key], rtol=1e-5)
    loss, grad = loss_and_grad(s0, feats, labels, means, valid, float(g["lam"]), kind)
    np.testing.assert_allclose(loss, g[loss_key], rtol=1e-5)
    np.testing.assert_allclose(grad, g[grad_key], atol=1e-6)
  pred = ms.ncm_predictions(s0, feats, means, jnp.max(labels))
  np.testing.assert_array_equal(pred, np.argmax(g["sims_s0"], axis=2).T)
  acc = ms.balanced_accuracy(pred, labels, valid.astype(F32), int(g["num_classes"]))
  np.testing.assert_allclose(acc, g["acc_s0"], atol=1e-6)


@golden_params("ncmc")
def test_published_search(golden):
  g = golden
  feats, labels, valid, _ = _inputs(g)
  res = ms.search_from(jnp.asarray(g["s0"], F32), feats, labels, valid, num_classes=int(g["num_classes"]),
                       lam=float(g["lam"]), lr=float(g["lr"]), steps=int(g["steps"]),
                       objective_kind="published_all_pairs", selection="published_off_by_one")
  np.testing.assert_allclose(res.loss_traj, g["loss_traj"], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(res.s_final, g["s_final"], atol=1e-3)
  np.testing.assert_allclose(res.acc_last, g["acc_last"], atol=1e-6)
  assert int(res.chosen) == int(g["chosen_clone_code"])
  np.testing.assert_array_equal(res.mask, g["mask_code"])
  np.testing.assert_allclose(res.top_salience, g["ret_code"], atol=1e-3)
  best = ms.search_from(jnp.asarray(g["s0"], F32), feats, labels, valid, num_classes=int(g["num_classes"]),
                        lam=float(g["lam"]), lr=float(g["lr"]), steps=int(g["steps"]),
                        objective_kind="published_all_pairs", selection="best")
  assert int(best.chosen) == int(g["chosen_clone_intended"])
  np.testing.assert_array_equal(best.mask, g["mask_intended"])


def test_off_by_one_selection_rule():
  acc = jnp.array([0.1, 0.5, 0.3, 0.9])  # The last restart is never looked at.
  chosen, a = ms.select_restart(acc, "published_off_by_one")
  assert (int(chosen), float(a)) == (2, pytest.approx(0.5))
  chosen, a = ms.select_restart(acc, "best")
  assert (int(chosen), float(a)) == (3, pytest.approx(0.9))
  chosen, a = ms.select_restart(jnp.array([0.7, 0.5, 0.9]), "published_off_by_one")
  assert (int(chosen), float(a)) == (0, pytest.approx(0.7))


def _clustered(seed, m=40, d=12, c=4):
  centers = randn(c, d, seed=2 * seed) * 2
  labels = jnp.arange(m) % c
  return l2_normalize(centers[labels] + randn(m, d, seed=2 * seed + 1)), labels


@pytest.mark.parametrize("kind", ms.OBJECTIVES)
def test_batched_restarts_equal_independent_runs(kind):
  feats, labels = _clustered(0)
  valid = jnp.ones(labels.shape, bool)
  s0 = randn(5, feats.shape[1], seed=1)
  others = np.asarray(randn(5, feats.shape[1], seed=7))
  search = functools.partial(ms.search_from, feats=feats, labels=labels, valid=valid, num_classes=4,
                             objective_kind=kind, steps=10, lr=10.0)
  batched = search(s0)
  for k in range(5):
    # Restart k among 4 other restarts: what it finds must not depend on them. (The same 5-restart program:
    # a 1-restart search would compile another, ~2 s.)
    mixed = others.copy()
    mixed[k] = np.asarray(s0[k])
    one = search(jnp.asarray(mixed))
    np.testing.assert_allclose(batched.s_final[k], one.s_final[k], atol=1e-5)
    np.testing.assert_allclose(batched.acc_last[k], one.acc_last[k], atol=1e-6)


def test_padding_rows_do_not_change_the_search():
  feats, labels = _clustered(2)
  s0 = randn(4, feats.shape[1], seed=3)
  plain = ms.search_from(s0, feats, labels, jnp.ones(40, bool), num_classes=6, steps=5)
  pad_feats = jnp.concatenate([feats, jnp.ones((7, feats.shape[1])) / np.sqrt(12)])
  pad_labels = jnp.concatenate([labels, jnp.full((7,), 5)])
  padded = ms.search_from(s0, pad_feats, pad_labels, jnp.arange(47) < 40, num_classes=6, steps=5)
  np.testing.assert_allclose(plain.s_final, padded.s_final, atol=1e-5)
  np.testing.assert_array_equal(plain.acc_last, padded.acc_last)


def test_own_class_search_finds_discriminative_dims():
  """Dims 0-3 separate the classes, the rest are shared noise: the search keeps them."""
  labels = jnp.arange(60) % 3
  signal = jax.nn.one_hot(labels, 4) * 3
  noise = randn(60, 12, seed=4) * 0.3 + 1.0
  feats = l2_normalize(jnp.concatenate([signal, noise], axis=1))
  res = ms.search(jax.random.PRNGKey(5), feats, labels, jnp.ones(60, bool), num_classes=3, restarts=16)
  assert float(res.accuracy) == 1.0
  assert bool(jnp.all(res.mask[:3]))
  assert not bool(jnp.any(res.mask[3:]))  # the constant dim and the 12 shared-noise dims are dropped
