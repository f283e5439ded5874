"""Work done at a task boundary t >= 1 before training on task t (LASP).

The look-ahead data D_SRS is drawn, embedded by the model as it ended task t-1
(eval mode), the salient subset is searched (SD, GM), and for GM the
excitation-backprop parameter salience is computed on the same images.
"""

from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax import choices
from lasp_jax.data import augment
from lasp_jax.data.arrays import Batch, DeviceData
from lasp_jax.method import mask_search, pools, salience
from lasp_jax.method.contrastive import Settings, contrastive_labels
from lasp_jax.method.modulation import is_weight_path

SRS_DATA = choices.SRS_DATA


class BoundaryResult(NamedTuple):
  mask: np.ndarray            # (D,) bool
  top_salience: np.ndarray    # (D,)
  gamma: object               # params-shaped salience, or None
  info: dict                  # what results.json records


def lookahead_rows(pool: Batch, memory_pool: Batch, srs_data: str, batch_size: int,
                   rng: np.random.Generator) -> Batch:
  """Sample rows of D_SRS with fixed shapes (padding marked invalid).

  ``onlycurrent``: one shuffled batch of (task data + memory), keeping the
  current-task samples. ``onlypast``: one shuffled batch of the memory.
  ``combined``: both.
  """
  def take(p: Batch, keep_current_only: bool) -> Batch:
    n = len(p.index)
    pick = rng.permutation(n)[:batch_size]
    out = [np.zeros(batch_size, np.asarray(f).dtype) for f in p]
    for dst, src in zip(out, p):
      dst[:len(pick)] = np.asarray(src)[pick]
    valid = np.zeros(batch_size, bool)
    valid[:len(pick)] = True
    if keep_current_only:
      valid &= out[2].astype(bool)
    out[3] = valid
    return Batch(*out)

  parts = {"onlycurrent": [take(pool, True)], "onlypast": [take(memory_pool, False)],
           "combined": [take(pool, True), take(memory_pool, False)]}[srs_data]
  return Batch(*[np.concatenate(f) for f in zip(*parts)])


@functools.partial(jax.jit, static_argnames=("model", "aug_cfg", "loss_cfg"))
def _embed(variables, data: DeviceData, rows: Batch, key, *, model, aug_cfg, loss_cfg):
  """Two eval-mode embedded views of the look-ahead rows, with labels and validity."""
  views = augment.two_views(key, data.images[rows.index], data.angles[rows.domain], aug_cfg)
  _, z = model.apply(variables, views, train=False)
  labels = contrastive_labels(data.labels[rows.index], data.tags[rows.domain], loss_cfg)
  return views, z, jnp.concatenate([labels, labels]), jnp.concatenate([rows.valid, rows.valid])


def _salience_impl(variables, views, p_top, *, model, replicas):
  return salience.excitation_backprop(model, variables, views, p_top, replicas=replicas)


@functools.lru_cache(maxsize=None)
def _salience(compiler_options: tuple = ()):
  """EB compiled with the train step's XLA:CPU options (cpu_kernels.py): its backward runs the
  net's custom convolution gradients, which are fast only on the kernels the train step uses."""
  return jax.jit(_salience_impl, static_argnames=("model", "replicas"),
                 compiler_options=dict(compiler_options) or None)


def boundary(key, model, variables, data: DeviceData, rows: Batch, *, aug_cfg, loss_cfg: Settings,
             lasp_cfg, num_classes: int, need_gamma: bool, compiler_options=None) -> BoundaryResult:
  """Mask search (and EB salience if ``need_gamma``) on the look-ahead rows.

  ``compiler_options``: the train step's XLA options (``cpu_kernels.compiler_options``), for EB.
  """
  k_aug, k_search = jax.random.split(key)
  t0 = time.perf_counter()
  views, z, labels, valid = _embed(variables, data, rows, k_aug, model=model, aug_cfg=aug_cfg, loss_cfg=loss_cfg)
  res = mask_search.search(k_search, z, labels, valid, num_classes=num_classes, restarts=lasp_cfg.restarts,
                           lam=lasp_cfg.l1, lr=lasp_cfg.lr, steps=lasp_cfg.steps,
                           objective_kind=lasp_cfg.mask_objective, selection=lasp_cfg.restart_selection)
  mask = np.asarray(res.mask)
  t1 = time.perf_counter()
  gamma, frac_frozen, by_layer, t2 = None, None, None, t1
  if need_gamma:
    p_top = jnp.where(valid[:, None], res.top_salience[None, :], 0.0)
    eb = _salience(tuple(sorted((compiler_options or {}).items())))
    gamma, _ = eb(variables, views, p_top, model=model, replicas=lasp_cfg.eb_replicas)
    frac_frozen, by_layer = weight_fraction_frozen(gamma), gamma_by_layer(gamma)
    t2 = time.perf_counter()
  info = {"selected_dims": int(mask.sum()), "selected": np.flatnonzero(mask).tolist(),
          "sd_fallback_to_full_ird": bool(mask.sum() <= 1), "chosen_restart": int(res.chosen),
          "chosen_accuracy": float(res.accuracy), "lookahead_rows": int(np.asarray(valid).sum()),
          "frac_weights_gamma_ge_1": frac_frozen, "search_s": round(t1 - t0, 4),
          "eb_s": round(t2 - t1, 4) if need_gamma else None,
          **({"gamma_by_layer": by_layer} if need_gamma else {})}
  return BoundaryResult(mask, np.asarray(res.top_salience), gamma, info)


def weight_fraction_frozen(gamma) -> float:
  """Fraction of modulated weights with gamma >= 1 (fully frozen by GM)."""
  # On the host: op by op on the device, each leaf's shape compiled programs of its own.
  leaves = [np.asarray(l) for p, l in jax.tree_util.tree_leaves_with_path(gamma) if is_weight_path(p)]
  total = sum(l.size for l in leaves)
  return float(sum(int(np.sum(l >= 1)) for l in leaves) / max(total, 1))


def gamma_by_layer(gamma) -> dict:
  """Per modulated weight (its parameter path): the share of its entries with gamma >= 1 (frozen) and the mean and
  largest gamma: where GM's freezing falls."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(gamma):
    if is_weight_path(path):
      name = "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)
      leaf = np.asarray(leaf)  # on the host, as weight_fraction_frozen
      out[name] = {"frozen": round(float(np.mean(leaf >= 1)), 4), "mean": round(float(np.mean(leaf)), 4),
                   "max": round(float(np.max(leaf)), 4), "size": int(leaf.size)}
  return out


def at_boundary(t: int, memory, pool: Batch, *, config, stream, parts, variables, data) -> BoundaryResult:
  """The LASP work before the learner's segment t: look-ahead rows drawn from the segment's training ``pool``
  (its data + the new ``memory``) as ``lasp.srs_data`` says, then :func:`boundary` on ``variables`` (the model as
  it ended segment t - 1). ``parts``: the run's model, aug_cfg, loss_cfg and compiler_options."""
  c, s = config, stream
  rng = np.random.default_rng([c.seed, t, 0x5253])
  rows = lookahead_rows(pool, pools.memory_pool(s, memory), c.lasp.srs_data, c.train.batch_size, rng)
  key = jax.random.fold_in(jax.random.PRNGKey(c.seed), 7919 + t)
  res = boundary(key, parts.model, variables, data, jax.tree.map(jnp.asarray, rows),
                 aug_cfg=parts.aug_cfg, loss_cfg=parts.loss_cfg, lasp_cfg=c.lasp,
                 num_classes=s.num_contrastive_classes, need_gamma=parts.loss_cfg.method.modulates,
                 compiler_options=parts.compiler_options)
  subset = c.lasp.get("subset", "searched")
  if subset == "random":
    res = random_subset(res, np.random.default_rng([c.seed, t, 0x726E64]))
  elif subset == "all":
    res = res._replace(mask=np.ones_like(res.mask), info=dict(res.info, searched=res.info["selected"],
                                                              selected=list(range(res.mask.size))))
  return res


def random_subset(res: BoundaryResult, rng: np.random.Generator) -> BoundaryResult:
  """The result with its mask replaced by as many dims drawn uniformly at random (the searched ones kept in
  ``info["searched"]``): SD then distils a subset of the searched size that no look-ahead chose."""
  mask = np.zeros_like(res.mask)
  mask[rng.choice(mask.size, int(res.mask.sum()), replace=False)] = True
  info = dict(res.info, searched=res.info["selected"], selected=np.flatnonzero(mask).tolist())
  return res._replace(mask=mask, info=info)
