"""Appendix Table 3: how well random embedding subsets transfer to past and future tasks.

At each task boundary, 100 random 10-dim subsets of the embedding; for each, a
linear (softmax) classifier trained on all past-task data and another on all
future-task data; accuracy on the matching test sets. All subsets are trained
together as one vmapped program.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax.eval import probe

NUM_SUBSETS = 100  # per boundary, as in the paper


def embed(ctx, carry, data, index):
  """Eval-mode head embeddings of ``data.images[index]`` (no augmentation)."""
  return probe.extract_features(ctx.model, carry.state.variables(), data, index, np.zeros(len(index), np.int64),
                                ctx.aug_cfg, kind="embedding")


@functools.partial(jax.jit, static_argnames=("num_classes", "steps"))
def subset_accuracy(subsets, x_tr, y_tr, x_te, y_te, *, num_classes, steps=300, lr=0.5):
  """(S,) test accuracy of a softmax classifier per dim subset (S, k), full-batch GD."""
  def one(dims):
    a, b = x_tr[:, dims], x_te[:, dims]
    # Unit-norm embeddings put ~0.1 in each coordinate: standardize on the training data so that a fixed
    # budget of full-batch steps trains every subset's classifier to convergence (a linear model's
    # accuracy is unchanged by this affine map; only the optimization is).
    mu, sd = a.mean(0), a.std(0) + 1e-6
    a, b = (a - mu) / sd, (b - mu) / sd
    w = jnp.zeros((dims.shape[0], num_classes))
    bias = jnp.zeros(num_classes)
    tx = optax.sgd(lr, momentum=0.9)
    params = (w, bias)
    opt = tx.init(params)

    def step(carry, _):
      params, opt = carry
      g = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(a @ p[0] + p[1], y_tr).mean())(params)
      u, opt = tx.update(g, opt, params)
      return (optax.apply_updates(params, u), opt), None

    (params, _), _ = jax.lax.scan(step, (params, opt), None, length=steps)
    return jnp.mean(jnp.argmax(b @ params[0] + params[1], -1) == y_te)
  return jax.vmap(one)(subsets)


def boundary_table(ctx, carry, t: int, num_subsets=NUM_SUBSETS, subset_dim=10, seed=0):
  """Mean and std (over subsets) of past- and future-task accuracy after task t."""
  s = ctx.stream
  d = ctx.config.model.embedding_dim
  rng = np.random.default_rng([seed, t])
  subsets = jnp.asarray(np.stack([rng.choice(d, min(subset_dim, d), replace=False) for _ in range(num_subsets)]))
  out = {}
  for name, tasks in (("past", range(t + 1)), ("future", range(t + 1, s.num_tasks))):
    tasks = list(tasks)
    if not tasks:
      continue
    tr = np.concatenate([s.train_indices(j) for j in tasks])
    te = np.concatenate([s.test_indices(j) for j in tasks])
    acc = subset_accuracy(subsets, embed(ctx, carry, carry.data, tr), jnp.asarray(s.train_labels[tr]),
                          embed(ctx, carry, ctx.test_data, te), jnp.asarray(s.test_labels[te]),
                          num_classes=s.num_classes)
    acc = 100 * np.asarray(acc)
    out[name] = {"mean": float(acc.mean()), "std": float(acc.std())}
  return out
