"""iCaRL (Rebuffi et al., 2017), class-incremental only: exemplars chosen by herding, distillation of the past
model's outputs, a nearest-mean-of-exemplars read-out.

* Memory: after each task, capacity // seen classes exemplars per class. A new class's are chosen by herding on the
  L2-normalized features (each pick the sample that brings the exemplars' mean closest to the class mean); an older
  class keeps the first of its own (herding's order is its priority). The exemplars join the next task's pool.
* Loss: binary cross-entropy with logits over the classes seen so far (its mean over rows and classes); the targets
  are one-hot, but for the classes of earlier tasks the past model's sigmoid outputs (its distillation), as the paper
  states. The current task is the batch's highest current label's (a batch holds current rows but in rare cases).
* Read-out (``nme``): the class means of the exemplars' normalized features (renormalized); a test image goes to the
  nearest one. Features are the encoder's (no flipped copies: digits).
* ``method_args.exemplars=published_uint8``: the exemplars replay as the DER paper's code (mammoth, 2020) replayed
  them on MNIST: its buffer's [0, 1] floats cast to uint8 without scaling, so a pixel is 1/255 where it was white
  and 0 elsewhere (its CIFAR branch scales by 255 first; today's mammoth does on MNIST too). ``published_raw``:
  that cast, and herding, class means and distances on the raw features, as that code computed them. Off by default.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax.method import buffer, pools
from lasp_jax.method.base import Observation, embedding_stats, forward
from lasp_jax.method.classifier import Classifier
from lasp_jax.method.features import extract_features
from lasp_jax.platform.numerics import l2_normalize


def herding(feats: np.ndarray, m: int) -> np.ndarray:
  """The rows of ``feats`` (one class's features) that herding picks, in order: each the row that brings the
  mean of the picks closest to the class mean (a row is picked once)."""
  mu = feats.mean(0)
  picked, total = [], np.zeros_like(mu)
  free = np.ones(len(feats), bool)
  for k in range(1, min(m, len(feats)) + 1):
    dist = np.linalg.norm(mu[None, :] - (total[None, :] + feats) / k, axis=1)
    dist[~free] = np.inf
    i = int(np.argmin(dist))
    picked.append(i)
    free[i] = False
    total += feats[i]
  return np.asarray(picked, np.int64)


class ICaRL(Classifier):
  draws = 1           # a device memory (its exemplars); no draws: the exemplars join the pool
  writes = "task_end"
  task_ends = True
  distills = True
  scenarios = ("class",)  # its read-out and exemplars are per class, its distillation over the past tasks' classes
  keeps_exemplars = True  # method_args.exemplars: what they replay (images, or the DER paper's code's cast)
  metrics = ("loss", "bce", "z_norm", "z_var")

  def readout(self, config) -> str:
    return "nme_raw" if _raw(config) else "nme"

  def pool(self, stream, memory, t: int, slot=None, state=None):
    own = pools.task_pool(stream, t, slot)
    mem = state.memory
    n = int(buffer.filled(mem))
    exemplars = pools.Batch(np.asarray(mem.index)[:n].astype(np.int32), np.asarray(mem.domain)[:n].astype(np.int32),
                            np.zeros(n, bool), np.ones(n, bool))
    pool = pools.concat_pools(own, exemplars)
    return pool, len(pool.index)

  def loss_terms(self, params, s, x, labels, model, cfg):
    (feats, logits), stats = forward(model, {"params": params, "batch_stats": s.state.batch_stats}, x, train=True,
                                     mask=s.batch.valid)
    task = jnp.max(jnp.where(s.batch.is_current & s.batch.valid, labels // cfg.classes_per_task, 0))
    seen = jnp.arange(cfg.num_classes) < (task + 1) * cfg.classes_per_task
    past = jnp.arange(cfg.num_classes) < task * cfg.classes_per_task
    targets = jax.nn.one_hot(labels, cfg.num_classes)
    if s.past is not None:
      (_, old), _ = forward(model, s.past._asdict(), x, train=False)
      targets = jnp.where(past[None, :], jax.nn.sigmoid(old), targets)
    per = optax.sigmoid_binary_cross_entropy(logits, jax.lax.stop_gradient(targets))
    w = s.batch.valid.astype(jnp.float32)[:, None] * seen[None, :]
    # the mean over rows and seen classes, as the DER paper's code (today's mammoth takes all ten outputs)
    bce = jnp.sum(w * per) / jnp.maximum(jnp.sum(w), 1.0)
    return bce, (feats, stats)

  def step_images(self, s, cfg) -> jax.Array:
    """The batch's uint8 images as its step reads them (``exemplars``: the exemplar rows' cast, see above)."""
    images = s.data.images[s.batch.index]
    if cfg.exemplars == "images":
      return images
    exemplar = (~s.batch.is_current).reshape((-1,) + (1,) * (images.ndim - 1))
    return jnp.where(exemplar, (images == 255).astype(images.dtype), images)

  def observe(self, s, *, model, aug_cfg, cfg) -> Observation:
    x = self.transform(s.key, self.step_images(s, cfg), s.data.angles[s.batch.domain], aug_cfg, cfg)
    labels = s.data.labels[s.batch.index]
    (bce, (feats, stats)), grads = jax.value_and_grad(self.loss_terms, has_aux=True)(
        s.state.params, s, x, labels, model, cfg)
    z_norm, z_var = embedding_stats(jax.lax.stop_gradient(feats), s.batch.valid)
    return Observation(grads, stats, s.state.memory, {"loss": bce, "bce": bce, "z_norm": z_norm, "z_var": z_var})

  def end_task(self, state, past, task):
    """Herding for the ended task's classes; the older classes cut to their first exemplars."""
    del past
    mem, cap = state.memory, task.config.memory.size
    n = int(buffer.filled(mem))
    old = {k: np.asarray(getattr(mem, k))[:n] for k in ("index", "domain", "label", "task")}
    classes = np.unique(np.asarray(task.labels))
    seen = len(np.unique(old["label"])) + len(classes)
    m = cap // seen
    rows = {k: [] for k in old}
    for c in np.unique(old["label"]):
      keep = np.flatnonzero(old["label"] == c)[:m]
      for k in rows:
        rows[k].append(old[k][keep])
    feats = jnp.asarray(_features(task, state))
    feats = np.asarray(feats if _raw(task.config) else l2_normalize(feats))
    for c in classes:
      own = np.flatnonzero(np.asarray(task.labels) == c)
      pick = own[herding(feats[own], m)]
      for k, v in (("index", task.index), ("domain", task.domain), ("label", task.labels)):
        rows[k].append(np.asarray(v)[pick])
      rows["task"].append(np.full(len(pick), task.task))
    new = {k: np.concatenate(v).astype(np.int32) for k, v in rows.items()}
    filled = len(new["index"])
    pad = lambda a: jnp.asarray(np.concatenate([a, np.zeros(cap - filled, np.int32)]))
    return state.replace(memory=mem._replace(index=pad(new["index"]), domain=pad(new["domain"]),
                                             label=pad(new["label"]), task=pad(new["task"]),
                                             seen=jnp.asarray(filled, jnp.int32)))


def _raw(config) -> bool:
  """Herding and the read-out on raw features (``exemplars=published_raw``), else on L2-normalized ones."""
  return config.method_args.get("exemplars") == "published_raw"


def _features(task, state):
  return extract_features(task.model, state.variables(), task.data, np.asarray(task.index), np.asarray(task.domain),
                          task.aug_cfg)
