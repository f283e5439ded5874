"""The cross-entropy family: a classifier head trained with cross-entropy, read out by that head.

A step sees one view of the stream batch (augmented, or with ``augment.train=False`` only rotated to its domain as
in the DER paper's MNIST protocol) and, for the replay methods, ``draws`` independent draws of
``method_args.minibatch_size`` rows from the device reservoir (method/buffer.py), which it then offers the stream
batch to. One forward pass covers the stream rows and every draw (valid rows only count); the method's
``loss`` combines the parts. This module's own methods are the family's bounds: the classifier on each task alone
(mammoth's SGD) and on every task so far (JOINT).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax.data import augment
from lasp_jax.method import buffer, pools
from lasp_jax.method.base import Method, Observation, StepInputs, embedding_stats, forward


@dataclasses.dataclass(frozen=True)
class Settings:
  """Static settings of the cross-entropy step (hashable)."""
  method: Any
  num_classes: int
  classes_per_task: int
  domain_tasks: bool     # a sample's task is its domain (Domain-IL), else its class block (Class-IL)
  minibatch: int         # rows of one memory draw
  alpha: float           # DER's logit-matching weight
  beta: float            # DER++'s weight of the second draw's cross-entropy
  augment: bool          # random augmentation of the training views (else the test transform)
  num_tasks: int = 0     # GEM: one gradient constraint per task
  gamma: float = 0.5     # GEM: the margin of its dual (mammoth's --gamma)
  gss_minibatch: int = 0  # GSS: remembered samples its gradient scores are against
  hal_lambda: float = 0.1  # HAL: the weight of its anchors' drift
  exemplars: str = "images"  # iCaRL: what its exemplar rows replay (icarl.py)


class Replay(NamedTuple):
  """One draw from the memory: its rows' images, labels and stored logits, and which rows hold a sample."""
  images: jax.Array
  labels: jax.Array
  logits: Optional[jax.Array]  # None: the memory keeps no logits
  valid: jax.Array


def cross_entropy(logits, labels, valid) -> tuple[jax.Array, jax.Array]:
  """(sum over the valid rows of the softmax cross-entropy, number of valid rows)."""
  w = valid.astype(jnp.float32)
  return jnp.sum(w * optax.softmax_cross_entropy_with_integer_labels(logits, labels)), jnp.sum(w)


def mean(total, count):
  return total / jnp.maximum(count, 1.0)


class Classifier(Method):
  """The family's lower bound: cross-entropy on each task alone, no memory (mammoth's SGD)."""
  family = "cross-entropy"
  head = "classifier"
  norm_diverges = False
  metrics = ("loss", "ce", "z_norm", "z_var")
  draws = 0             # independent memory draws a step takes
  keeps_logits = False  # memory rows keep the logits the model gave them at insertion
  writes = "step"       # when the memory takes samples: "step" (every step's batch, by reservoir) or "task_end"
                        # (capacity / tasks random samples of each task as it ends: the DER paper's A-GEM and GEM)

  def settings(self, config, stream) -> Settings:
    a = config.method_args
    return Settings(method=self, num_classes=stream.num_classes, classes_per_task=stream.classes_per_task,
                    domain_tasks=stream.rotates, minibatch=a.minibatch_size or config.train.batch_size,
                    alpha=float(a.alpha), beta=float(a.beta), augment=bool(config.augment.train),
                    num_tasks=stream.num_tasks, gamma=float(a.get("gamma", 0.5)),
                    gss_minibatch=a.get("gss_minibatch_size", 0) or a.minibatch_size or config.train.batch_size,
                    hal_lambda=float(a.get("hal_lambda", 0.1)), exemplars=a.get("exemplars", "images"))

  def init_memory(self, config, stream, **_):
    return buffer.empty(config.memory.size, stream.num_classes if self.keeps_logits else 0) if self.draws else {}

  def readout(self, config) -> str:
    del config
    return "head"

  def loss(self, logits, labels, valid, replays, replay_logits, cfg: Settings) -> tuple[jax.Array, dict]:
    """The objective from the stream rows' logits and each draw's: (loss, its terms by name)."""
    del replays, replay_logits, cfg
    ce = mean(*cross_entropy(logits, labels, valid))
    return ce, {"ce": ce}

  def views(self, key, data, index, domain, aug_cfg, cfg: Settings):
    return self.transform(key, data.images[index], data.angles[domain], aug_cfg, cfg)

  def transform(self, key, images, angles, aug_cfg, cfg: Settings):
    """The training views of uint8 ``images`` at their domains' ``angles``."""
    if cfg.augment:
      return augment.one_view(key, images, angles, aug_cfg)
    return augment.test_transform(images, angles, aug_cfg)

  def task_of(self, labels, domain, cfg: Settings):
    return domain if cfg.domain_tasks else labels // cfg.classes_per_task

  def memory_draws(self, s: StepInputs, key, aug_cfg, cfg: Settings) -> list[Replay]:
    """The step's draws from the memory, each independent of the others."""
    out, mem = [], s.state.memory
    for k in jax.random.split(key, self.draws) if self.draws else ():
      k_draw, k_view = jax.random.split(k)
      slots, valid = buffer.draw(mem, k_draw, cfg.minibatch)
      images = self.views(k_view, s.data, mem.index[slots], mem.domain[slots], aug_cfg, cfg)
      out.append(Replay(images, mem.label[slots], None if mem.logits is None else mem.logits[slots], valid))
    return out

  def objective(self, params, s: StepInputs, x, labels, replays, model, cfg: Settings):
    rows = [x, *(r.images for r in replays)]
    valid = jnp.concatenate([s.batch.valid, *(r.valid for r in replays)])
    (feats, logits), stats = forward(model, {"params": params, "batch_stats": s.state.batch_stats},
                                     jnp.concatenate(rows), train=True, mask=valid)
    bounds = [0, *itertools.accumulate(len(r) for r in rows)]
    parts = [logits[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    loss, terms = self.loss(parts[0], labels, s.batch.valid, replays, parts[1:], cfg)
    return loss, (terms, parts[0], feats[:len(x)], stats)

  def step_gradients(self, s: StepInputs, k_view, k_replay, model, aug_cfg, cfg: Settings):
    """The stream batch's views and labels, the memory's draws, and the objective's value, aux and gradients on
    them: where every method of the family starts its step. (x, labels, loss, aux, grads)."""
    x = self.views(k_view, s.data, s.batch.index, s.batch.domain, aug_cfg, cfg)
    labels = s.data.labels[s.batch.index]
    replays = self.memory_draws(s, k_replay, aug_cfg, cfg)
    (loss, aux), grads = jax.value_and_grad(self.objective, has_aux=True)(
        s.state.params, s, x, labels, replays, model, cfg)
    return x, labels, loss, aux, grads

  def observe(self, s: StepInputs, *, model, aug_cfg, cfg: Settings) -> Observation:
    k_view, k_replay, k_insert = jax.random.split(s.key, 3)
    _, labels, loss, (terms, logits, feats, stats), grads = self.step_gradients(s, k_view, k_replay, model, aug_cfg,
                                                                               cfg)
    z_norm, z_var = embedding_stats(jax.lax.stop_gradient(feats).astype(jnp.float32), s.batch.valid)
    memory = s.state.memory
    if self.draws and self.writes == "step":  # mammoth adds the batch after the step, with this step's logits
      memory = buffer.insert(memory, k_insert, index=s.batch.index, domain=s.batch.domain, label=labels,
                             task=self.task_of(labels, s.batch.domain, cfg),
                             logits=jax.lax.stop_gradient(logits), valid=s.batch.valid)
    return Observation(grads, stats, memory, {"loss": loss, **terms, "z_norm": z_norm, "z_var": z_var})


  def end_task(self, state, past, task):
    """A memory written at task ends is offered ``method_args.task_samples`` (0: capacity // tasks) of the ended
    task's samples, drawn at random; past the capacity the reservoir keeps a uniform share of all offered."""
    del past
    if not self.draws or self.writes != "task_end":
      return state
    n, offered = len(task.index), task.config.method_args.get("task_samples", 0)
    pick = np.random.default_rng([task.config.seed, task.task, 0xE9150]).choice(
        n, min(n, offered or task.config.memory.size // task.num_tasks), replace=False)
    rows = lambda a: jnp.asarray(np.asarray(a)[pick], jnp.int32)
    key = jax.random.fold_in(jax.random.PRNGKey(task.config.seed), task.task)  # the reservoir's, once it is full
    memory = buffer.insert(state.memory, key, index=rows(task.index), domain=rows(task.domain),
                           label=rows(task.labels), task=jnp.full(len(pick), task.task, jnp.int32), logits=None,
                           valid=jnp.ones(len(pick), bool))
    return state.replace(memory=memory)

  def stream_gradients(self, s: StepInputs, model, aug_cfg, cfg: Settings, key):
    """The stream batch's cross-entropy, its gradients and the rest of observe's figures, with no memory term."""
    x = self.views(key, s.data, s.batch.index, s.batch.domain, aug_cfg, cfg)
    grad_fn = jax.value_and_grad(self.objective, has_aux=True)
    labels = s.data.labels[s.batch.index]
    (loss, (terms, _, feats, stats)), grads = grad_fn(s.state.params, s, x, labels, [], model, cfg)
    z_norm, z_var = embedding_stats(jax.lax.stop_gradient(feats).astype(jnp.float32), s.batch.valid)
    return grads, stats, {"loss": loss, **terms, "z_norm": z_norm, "z_var": z_var}

  def replay_loss(self, params, s: StepInputs, replay: Replay, model):
    """The mean cross-entropy of the model on one draw from the memory (its valid rows)."""
    (_, logits), _ = forward(model, {"params": params, "batch_stats": s.state.batch_stats}, replay.images,
                             train=True, mask=replay.valid)
    return mean(*cross_entropy(logits, replay.labels, replay.valid))


class JointClassifier(Classifier):
  """The family's upper bound: cross-entropy on every task so far, every sample once an epoch (mammoth's JOINT)."""
  cumulative = True

  def pool(self, stream, memory, t: int, slot=None, state=None):
    pool = pools.concat_pools(*[pools.task_pool(stream, j) for j in range(t + 1)])
    return pool, len(pool.index)
