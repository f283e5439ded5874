"""Averaged GEM (A-GEM; Chaudhry et al., 2019): a step's gradient g is projected when it disagrees with the
gradient g_ref of the memory's cross-entropy on a draw of ``method_args.minibatch_size`` remembered samples:
if g . g_ref < 0, g - (g . g_ref / g_ref . g_ref) g_ref (orthogonal to g_ref), else g unchanged. The memory is offered
random samples of each task as it ends: capacity // tasks (the DER paper's code release reads its loader of that
size), or ``method_args.task_samples`` of them (mammoth today offers one training batch: ``train.batch_size``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from lasp_jax.method.base import Observation
from lasp_jax.method.classifier import Classifier

tree_vdot = optax.tree.vdot


def agem_project(g, g_ref):
  """g projected onto the half-space where it does not increase the memory's loss (to first order)."""
  dot, ref = tree_vdot(g, g_ref), tree_vdot(g_ref, g_ref)
  scale = jnp.where(dot < 0, dot / jnp.maximum(ref, 1e-30), 0.0)
  return jax.tree.map(lambda x, r: x - scale * r, g, g_ref)


class AGEM(Classifier):
  draws = 1
  writes = "task_end"
  task_ends = True

  def observe(self, s, *, model, aug_cfg, cfg) -> Observation:
    k_view, k_replay = jax.random.split(s.key)
    grads, stats, metrics = self.stream_gradients(s, model, aug_cfg, cfg, k_view)
    (replay,) = self.memory_draws(s, k_replay, aug_cfg, cfg)
    g_ref = jax.grad(self.replay_loss)(s.state.params, s, replay, model)
    return Observation(agem_project(grads, g_ref), stats, s.state.memory, metrics)
