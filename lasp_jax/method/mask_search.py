"""Salient-subset search: nearest-class-mean-classifier (NCMC) mask search.

All K random restarts are optimized together. Nothing of size K x M x D or a
per-restart M x M matrix is formed: with m = sigmoid(s) every cosine factors into
matrix products against m**2 (K x D):

  ||e_i * m_k||^2        = (E**2 @ m2.T)[i, k]
  ||mu_c * m_k||^2       = (mu**2 @ m2.T)[c, k]
  <e_i * m_k, mu_c * m_k> = ((E * mu_c) @ m2.T)[i, k]

Protocol section 4; the two published slips (all-pairs objective, off-by-one
restart choice) are reachable through ``objective`` and ``selection``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lasp_jax import choices
from lasp_jax.method.losses import l2_normalize
from lasp_jax.platform.numerics import full_precision

OBJECTIVES = choices.MASK_OBJECTIVES
SELECTIONS = choices.RESTART_SELECTIONS
_EPS = 1e-12


class SearchResult(NamedTuple):
  mask: jax.Array        # (D,) bool: the salient subset.
  top_salience: jax.Array  # (D,) sigmoid(s) > 0.5 kept, times the restart's accuracy.
  chosen: jax.Array      # () int: the returned restart.
  accuracy: jax.Array    # () the accuracy that selected it.
  acc_last: jax.Array    # (K,) per-restart accuracy of the iterate before the last step.
  loss_traj: jax.Array   # (steps,) objective before each step.
  s_final: jax.Array     # (K, D) final logits.


@full_precision
def class_means(feats, labels, num_classes, valid=None):
  """(C, D) normalized class means; zero rows for absent classes."""
  w = jnp.ones(labels.shape, feats.dtype) if valid is None else valid.astype(feats.dtype)
  onehot = jax.nn.one_hot(labels, num_classes, dtype=feats.dtype) * w[:, None]
  return l2_normalize(onehot.T @ feats)


def _norms(feats, means, m2):
  # max(sqrt(x), eps) written as sqrt(max(x, eps^2)): same value, and a zero
  # gradient (not NaN) for the all-zero rows of absent classes.
  rep = jnp.sqrt(jnp.maximum(jnp.square(feats) @ m2.T, _EPS**2))   # (M, K)
  proto = jnp.sqrt(jnp.maximum(jnp.square(means) @ m2.T, _EPS**2))  # (C, K)
  return rep, proto


@full_precision
def objective(s, feats, labels, means, valid, kind: str = "own_class"):
  """Per-restart similarity objective (K,) to be maximized.

  ``own_class``: mean cosine of each masked sample with its own masked class mean
  (the paper's intent). ``published_all_pairs``: the released code's M x M average
  of every sample against the class mean of every sample's label.
  """
  m2 = jnp.square(jax.nn.sigmoid(s))
  w = valid.astype(feats.dtype)
  n = jnp.maximum(jnp.sum(w), 1)
  rep, proto = _norms(feats, means, m2)
  if kind == "own_class":
    num = (feats * means[labels]) @ m2.T                      # (M, K)
    sims = num / (rep * proto[labels])
    return (w @ sims) / n
  if kind == "published_all_pairs":
    counts = jax.nn.one_hot(labels, means.shape[0], dtype=feats.dtype).T @ w   # (C,)
    a = (counts[:, None] / proto).T @ means                   # (K, D)
    num = feats @ (m2 * a).T                                  # (M, K)
    return (w @ (num / rep)) / jnp.square(n)
  raise ValueError(f"unknown mask objective {kind!r}; expected one of {OBJECTIVES}")


@full_precision
def search_loss(s, feats, labels, means, valid, lam, kind="own_class"):
  """``lam * sum(sigmoid(s)) - sum_k objective_k`` (minimized)."""
  return lam * jnp.sum(jax.nn.sigmoid(s)) - jnp.sum(objective(s, feats, labels, means, valid, kind))


@full_precision
def ncm_predictions(s, feats, means, max_label):
  """(M, K) nearest-class-mean prediction of every sample under every restart.

  Argmax over classes 0..max_label, absent ones scoring 0, ties to the lowest
  index. A scan over classes keeps memory at M x K.
  """
  m2 = jnp.square(jax.nn.sigmoid(s))
  rep, proto = _norms(feats, means, m2)

  def step(carry, c):
    best, arg = carry
    sim = ((feats * means[c]) @ m2.T) / (rep * proto[c])
    better = (sim > best) & (c <= max_label)
    return (jnp.where(better, sim, best), jnp.where(better, c, arg)), None

  init = (jnp.full(rep.shape, -jnp.inf, rep.dtype), jnp.zeros(rep.shape, jnp.int32))
  (_, arg), _ = jax.lax.scan(step, init, jnp.arange(means.shape[0]))
  return arg


@full_precision
def balanced_accuracy(pred, labels, valid, num_classes):
  """(K,) mean over present classes of the per-class accuracy."""
  onehot = jax.nn.one_hot(labels, num_classes, dtype=jnp.float32) * valid[:, None]
  correct = (pred == labels[:, None]).astype(jnp.float32)          # (M, K)
  counts = jnp.sum(onehot, axis=0)
  per_class = (onehot.T @ correct) / jnp.maximum(counts, 1)[:, None]  # (C, K)
  present = (counts > 0).astype(jnp.float32)
  return (present @ per_class) / jnp.maximum(jnp.sum(present), 1)


def select_restart(acc, kind: str = "best"):
  """Returns (chosen restart, the accuracy that chose it)."""
  if kind == "best":
    chosen = jnp.argmax(acc)
    return chosen, acc[chosen]
  if kind == "published_off_by_one":
    if acc.shape[0] == 1:
      return jnp.int32(0), acc[0]
    j = jnp.argmax(acc[:-1])  # The code compares acc_i but returns restart i + 1.
    return jnp.where(j > 0, j + 1, 0), acc[j]
  raise ValueError(f"unknown restart selection {kind!r}; expected one of {SELECTIONS}")


@functools.partial(jax.jit, static_argnames=("num_classes", "steps", "objective_kind", "selection"))
@full_precision
def search_from(s0, feats, labels, valid, *, num_classes, lam=1e-5, lr=100.0, steps=50,
                objective_kind="own_class", selection="best"):
  """Runs the mask search from given initial logits ``s0`` (K, D).

  Args:
    s0: (K, D) initial logits, one row per restart.
    feats: (M, D) unit-norm embeddings of the look-ahead data (padding allowed).
    labels: (M,) int labels.
    valid: (M,) bool, false for padding rows.
    num_classes: static upper bound on the labels.
    lam, lr, steps: L1 weight on sigmoid(s), SGD step size, number of steps.
    objective_kind: "own_class" or "published_all_pairs".
    selection: "best" or "published_off_by_one".

  Returns:
    A :class:`SearchResult`.
  """
  valid = valid.astype(bool)
  feats = feats.astype(jnp.float32)
  labels = jnp.where(valid, labels, 0)
  means = class_means(feats, labels, num_classes, valid)
  grad_fn = jax.value_and_grad(search_loss)

  def step(carry, _):
    s, _ = carry
    loss, g = grad_fn(s, feats, labels, means, valid, lam, objective_kind)
    return (s - lr * g, s), loss

  (s_final, s_prev), loss_traj = jax.lax.scan(step, (s0, s0), None, length=steps)
  max_label = jnp.max(jnp.where(valid, labels, 0))
  pred = ncm_predictions(s_prev, feats, means, max_label)
  acc = balanced_accuracy(pred, labels, valid.astype(jnp.float32), num_classes)
  chosen, chosen_acc = select_restart(acc, selection)
  sig = jax.nn.sigmoid(s_final[chosen])
  top = jnp.where(sig > 0.5, sig, 0.0) * chosen_acc
  return SearchResult(top > 0, top, chosen, chosen_acc, acc, loss_traj, s_final)


def search(key, feats, labels, valid, *, num_classes, restarts=300, **kwargs):
  """Mask search from ``restarts`` i.i.d. N(0, 1) initial logits (see :func:`search_from`)."""
  s0 = jax.random.normal(key, (restarts, feats.shape[-1]), jnp.float32)
  return search_from(s0, feats, labels, valid, num_classes=num_classes, **kwargs)
