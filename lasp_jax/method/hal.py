"""Hindsight Anchor Learning (HAL; Chaudhry et al., 2021), as the DER paper ran it (mammoth).

* Memory: a ring buffer, capacity // tasks slots per task, each task's slots overwritten first-in first-out; and one
  anchor image per class of every ended task.
* Step: ER's cross-entropy over the stream batch and a memory draw gives g1; at the weights one SGD step along it
  reaches (w - lr g1) the anchors' outputs are fixed targets c, and g2 is the gradient at w of
  ``method_args.hal_lambda`` x mean((c - f(w, anchors))^2): a step that would move the anchors' outputs is pulled
  back. The update applies g1 + g2 (mammoth's two backward passes into one step). phi, the mean feature of the
  stream's batches, is kept as a moving average (weight ``method_args.beta`` on the old value).
* At a task's end: the model after one SGD step on a memory batch (a look at the future) is set against the model
  as it is; for each of the task's classes an anchor starts as uniform noise and takes 100 SGD steps on
  -CE(fine-tuned, anchor) + CE(current, anchor) + gamma ||features(anchor) - phi||^2 (``method_args.gamma``): the
  input whose prediction the fine-tuning would forget most, kept near the task's mean feature. phi then restarts.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax.data import augment
from lasp_jax.method import buffer
from lasp_jax.method.base import Observation, embedding_stats, forward
from lasp_jax.method.classifier import cross_entropy, mean
from lasp_jax.method.er import ER
from lasp_jax.model.models import feature_dim

ANCHOR_STEPS = 100


def ring_slots(seen, valid, portion: int, task):
  """The slot of each row of a batch in the current task's portion of a ring buffer, first-in first-out; where a
  batch wraps the portion, the later row keeps the slot (int32's largest value marks a row written over or padding:
  a write there is dropped)."""
  valid = valid.astype(jnp.int32)
  n = seen + jnp.cumsum(valid) - valid
  slot = task * portion + n % portion
  rows = jnp.arange(valid.shape[0])
  later = (slot[None, :] == slot[:, None]) & (valid[None, :] > 0) & (rows[None, :] > rows[:, None])
  keep = (valid > 0) & ~jnp.any(later, axis=1)
  return jnp.where(keep, slot, jnp.iinfo(jnp.int32).max)


class HAL(ER):
  task_ends = True
  metrics = ("loss", "ce", "anchor_drift", "z_norm", "z_var")

  def init_memory(self, config, stream, *, model=None, image_shape=(), **_):
    anchors = stream.num_tasks * stream.classes_per_task
    return {"buffer": buffer.empty(config.memory.size), "seen": jnp.zeros((), jnp.int32),
            "task": jnp.zeros((), jnp.int32), "anchors": jnp.zeros((anchors, *image_shape), jnp.float32),
            "num_anchors": jnp.zeros((), jnp.int32),
            "phi": jnp.zeros(feature_dim(model), jnp.float32)}

  def observe(self, s, *, model, aug_cfg, cfg) -> Observation:
    k_view, k_replay = jax.random.split(s.key)
    mem = s.state.memory
    held = s._replace(state=s.state.replace(memory=mem["buffer"]))
    x, labels, loss, (terms, _, feats, stats), g1 = self.step_gradients(held, k_view, k_replay, model, aug_cfg, cfg)
    variables = lambda p: {"params": p, "batch_stats": stats}
    moved = jax.tree.map(lambda p, g: p - s.lr * g, s.state.params, g1)
    valid = jnp.arange(mem["anchors"].shape[0]) < mem["num_anchors"]
    (_, target), _ = forward(model, variables(moved), mem["anchors"], train=False)

    def drift(params):
      (_, out), _ = forward(model, variables(params), mem["anchors"], train=False)
      w = valid.astype(jnp.float32)[:, None]
      return jnp.sum(w * (jax.lax.stop_gradient(target) - out) ** 2) / jnp.maximum(jnp.sum(w) * out.shape[-1], 1.0)

    d, g2 = jax.value_and_grad(drift)(s.state.params)
    grads = jax.tree.map(lambda a, b: a + cfg.hal_lambda * b, g1, g2)
    after = jax.tree.map(lambda p, g: p - s.lr * g, s.state.params, grads)
    (now, _), _ = forward(model, variables(after), x, train=False)
    w = s.batch.valid.astype(jnp.float32)
    phi = cfg.beta * mem["phi"] + (1 - cfg.beta) * (w @ now) / jnp.maximum(jnp.sum(w), 1.0)
    memory = {**mem, "buffer": self.ring_insert(mem, s.batch, labels, cfg), "phi": phi,
              "seen": mem["seen"] + jnp.sum(s.batch.valid).astype(jnp.int32)}
    z_norm, z_var = embedding_stats(jax.lax.stop_gradient(feats).astype(jnp.float32), s.batch.valid)
    return Observation(grads, stats, memory, {"loss": loss + cfg.hal_lambda * d, **terms, "anchor_drift": d,
                                              "z_norm": z_norm, "z_var": z_var})

  def ring_insert(self, mem, batch, labels, cfg):
    buf = mem["buffer"]
    portion = buf.index.shape[0] // cfg.num_tasks
    slot = ring_slots(mem["seen"], batch.valid, portion, mem["task"])
    put = lambda field, v: field.at[slot].set(v.astype(field.dtype), mode="drop")
    filled = mem["task"] * portion + jnp.minimum(mem["seen"] + jnp.sum(batch.valid), portion)
    return buffer.Buffer(put(buf.index, batch.index), put(buf.domain, batch.domain), put(buf.label, labels),
                         put(buf.task, jnp.full_like(labels, mem["task"])), None, filled.astype(jnp.int32))

  def end_task(self, state, past, task):
    """The ended task's anchors (one per class), then the next task's portion and a new phi."""
    del past
    mem, c = state.memory, task.config
    key = jax.random.fold_in(jax.random.PRNGKey(c.seed), 0xA4C + task.task)
    classes = np.unique(np.asarray(task.labels))  # a Split task's classes; every digit of a domain
    anchors = _anchors(state.params, state.batch_stats, mem["buffer"], task.data, key, jnp.asarray(classes),
                       model=task.model, aug_cfg=task.aug_cfg, lr=float(c.train.lr), batch=int(c.train.batch_size),
                       gamma=float(c.method_args.gamma), shape=tuple(mem["anchors"].shape[1:]), phi=mem["phi"])
    n = int(mem["num_anchors"])
    rows = jnp.arange(len(classes)) + n
    memory = {**mem, "anchors": mem["anchors"].at[rows].set(anchors),
              "num_anchors": jnp.asarray(n + len(classes), jnp.int32), "task": mem["task"] + 1,
              "seen": jnp.zeros((), jnp.int32), "phi": jnp.zeros_like(mem["phi"])}
    return state.replace(memory=memory)


@functools.partial(jax.jit, static_argnames=("model", "aug_cfg", "lr", "batch", "gamma", "shape"))
def _anchors(params, batch_stats, buf, data, key, classes, phi, *, model, aug_cfg, lr, batch, gamma, shape):
  """One anchor per class: 100 SGD steps from uniform noise against the model after one step on a memory batch."""
  k_draw, k_noise = jax.random.split(key)
  variables = lambda p: {"params": p, "batch_stats": batch_stats}
  slots, valid = buffer.draw(buf, k_draw, batch)
  images = augment.test_transform(data.images[buf.index[slots]], data.angles[buf.domain[slots]], aug_cfg)

  def memory_loss(p):
    (_, logits), _ = forward(model, variables(p), images, train=False)
    return mean(*cross_entropy(logits, buf.label[slots], valid))

  future = jax.tree.map(lambda p, g: p - lr * g, params, jax.grad(memory_loss)(params))

  def anchor_loss(e, label):
    ce = lambda p: optax.softmax_cross_entropy_with_integer_labels(
        forward(model, variables(p), e[None], train=False)[0][1], label[None])[0]
    feats = forward(model, variables(params), e[None], train=False)[0][0][0]
    return -ce(future) + ce(params) + gamma * jnp.sum((feats - phi) ** 2)

  def one(k, label):
    e = jax.random.uniform(k, shape)
    return jax.lax.fori_loop(0, ANCHOR_STEPS, lambda _, e: e - lr * jax.grad(anchor_loss)(e, label), e)

  return jax.vmap(one)(jax.random.split(k_noise, classes.shape[0]), classes)
