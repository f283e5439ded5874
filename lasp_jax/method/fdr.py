"""Function Distance Regularization (FDR; Benjamin et al., 2019), as the DER paper ran it (mammoth at its code
release): an SGD step on the stream's cross-entropy, then a second step on the mean over a memory draw of the L2
distance between the softmax outputs and those stored when the sample entered; the memory keeps, as each task ends,
capacity // (tasks so far) samples of every task (older tasks cut to their first), each with the logits of the model
that just finished the task. mammoth's ``--alpha`` plays no part, and none here.

The two steps are one update here: the second gradient is taken at the weights the first step reaches (w - lr g1),
and the optimizer applies g1 + g2. With plain SGD (momentum and weight decay 0, the DER protocol) that is exactly
two SGD steps; with momentum it is not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax.method import buffer
from lasp_jax.method.base import Observation, forward
from lasp_jax.method.classifier import Classifier
from lasp_jax.method.features import extract_features


def softmax_distance(logits, stored, valid):
  """Mean over the valid rows of ||softmax(logits) - softmax(stored)||_2."""
  d = jnp.linalg.norm(jax.nn.softmax(logits) - jax.nn.softmax(stored), axis=-1)
  w = valid.astype(jnp.float32)
  return jnp.sum(w * d) / jnp.maximum(jnp.sum(w), 1.0)


class FDR(Classifier):
  draws = 1
  keeps_logits = True
  writes = "task_end"
  task_ends = True
  metrics = ("loss", "ce", "function_distance", "z_norm", "z_var")

  def observe(self, s, *, model, aug_cfg, cfg) -> Observation:
    k_view, k_replay = jax.random.split(s.key)
    g1, stats, metrics = self.stream_gradients(s, model, aug_cfg, cfg, k_view)
    (replay,) = self.memory_draws(s, k_replay, aug_cfg, cfg)
    moved = jax.tree.map(lambda p, g: p - s.lr * g, s.state.params, g1)

    def distance(params):
      (_, logits), _ = forward(model, {"params": params, "batch_stats": stats}, replay.images, train=True,
                               mask=replay.valid)
      return softmax_distance(logits, replay.logits, replay.valid)

    dist, g2 = jax.value_and_grad(distance)(moved)
    grads = jax.tree.map(lambda a, b: a + b, g1, g2)
    return Observation(grads, stats, s.state.memory, {**metrics, "function_distance": dist})

  def end_task(self, state, past, task):
    """capacity // (tasks so far) per task: the older tasks' first, the ended task's drawn at random, with the
    logits of the model as it ends the task."""
    del past
    mem, cap = jax.tree.map(np.asarray, state.memory), task.config.memory.size
    quota = cap // (task.task + 1)
    n = int(buffer.filled(state.memory))
    keep = np.concatenate([np.flatnonzero(mem.task[:n] == j)[:quota] for j in range(task.task)] or
                          [np.zeros(0, np.int64)]).astype(np.int64)
    pick = np.random.default_rng([task.config.seed, task.task, 0xFD7]).choice(
        len(task.index), min(quota, len(task.index)), replace=False)
    index, domain = np.asarray(task.index)[pick], np.asarray(task.domain)[pick]
    logits = np.asarray(extract_features(task.model, state.variables(), task.data, index, domain, task.aug_cfg,
                                         kind="embedding"))
    rows = {"index": (mem.index[keep], index), "domain": (mem.domain[keep], domain),
            "label": (mem.label[keep], np.asarray(task.labels)[pick]), "task": (mem.task[keep], np.full(len(pick),
                                                                                                     task.task))}
    filled = len(keep) + len(pick)
    pad = lambda a, dtype=np.int32: jnp.asarray(np.concatenate([np.concatenate(a).astype(dtype), np.zeros(
        (cap - filled, *np.shape(a[0])[1:]), dtype)]))
    return state.replace(memory=buffer.Buffer(
        **{k: pad(v) for k, v in rows.items()}, logits=pad((mem.logits[keep], logits), np.float32),
        seen=jnp.asarray(filled, jnp.int32)))
