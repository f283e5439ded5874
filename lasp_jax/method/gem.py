"""Gradient Episodic Memory (GEM; Lopez-Paz & Ranzato, 2017): the memory holds capacity // tasks random samples of
each ended task; a step's gradient g is kept if it agrees (g . g_k >= 0) with the gradient g_k of every past task's
remembered samples, else replaced by the closest gradient that agrees with all of them, from the dual quadratic
program (as mammoth solves it: min_v 1/2 v'(GG' + 1e-3 I)v + (Gg)'v subject to v >= gamma, then g + G'v; gamma is
``method_args.gamma``). The dual is solved inside the step by coordinate descent (``GEM_SWEEPS`` sweeps)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from lasp_jax.method import buffer
from lasp_jax.method.base import Observation, forward
from lasp_jax.method.classifier import Classifier

GEM_SWEEPS = 50
EPS = 1e-3


def gem_dual(P, b, active, margin: float, sweeps: int = GEM_SWEEPS):
  """argmin_v 1/2 v'Pv + b'v over v_i >= margin for the active constraints (v_i = 0 for the others), by exact
  coordinate descent: each coordinate in turn set to its minimizer, clipped at the margin."""
  v = jnp.where(active, margin, 0.0)

  def coordinate(i, v):
    vi = jnp.maximum(margin, v[i] - (P[i] @ v + b[i]) / P[i, i])
    return v.at[i].set(jnp.where(active[i], vi, 0.0))

  return jax.lax.fori_loop(0, sweeps * len(b), lambda k, v: coordinate(k % len(b), v), v)


def gem_project(g, G, active, margin: float):
  """g (flat) kept if g . G_k >= 0 for every active row k of G, else the dual's projection g + G'v."""
  P = G @ G.T + EPS * jnp.eye(G.shape[0])
  v = gem_dual(P, G @ g, active, margin)
  violated = jnp.any(active & (G @ g < 0))
  return jnp.where(violated, g + G.T @ v, g)


class GEM(Classifier):
  draws = 1
  writes = "task_end"
  task_ends = True

  def task_gradients(self, s, model, aug_cfg, cfg, key):
    """(num_tasks, parameters) the flat gradient of each task's mean cross-entropy over its remembered samples,
    and which tasks have any."""
    mem = s.state.memory
    valid = jnp.arange(mem.index.shape[0]) < buffer.filled(mem)
    images = self.views(key, s.data, mem.index, mem.domain, aug_cfg, cfg)
    onehot = (mem.task[None, :] == jnp.arange(cfg.num_tasks)[:, None]) & valid[None, :]
    counts = jnp.sum(onehot, axis=1)
    weights = onehot / jnp.maximum(counts, 1)[:, None]

    def weighted(params, w):
      (_, logits), _ = forward(model, {"params": params, "batch_stats": s.state.batch_stats}, images, train=True,
                               mask=valid)
      return jnp.sum(w * optax.softmax_cross_entropy_with_integer_labels(logits, mem.label))

    G = jax.vmap(lambda w: ravel_pytree(jax.grad(weighted)(s.state.params, w))[0])(weights)
    return G, counts > 0

  def observe(self, s, *, model, aug_cfg, cfg) -> Observation:
    k_view, k_mem = jax.random.split(s.key)
    grads, stats, metrics = self.stream_gradients(s, model, aug_cfg, cfg, k_view)
    flat, unravel = ravel_pytree(grads)
    G, active = self.task_gradients(s, model, aug_cfg, cfg, k_mem)
    return Observation(unravel(gem_project(flat, G, active, cfg.gamma)), stats, s.state.memory, metrics)
