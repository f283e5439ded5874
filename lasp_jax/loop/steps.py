"""The compiled contrastive train step, looped over a chunk of steps.

One step = gather the batch from the device-resident uint8 training set, augment
two views, forward the current (and frozen past) model, SupCon + lambda * (S)IRD,
gradients, optimizer update (GM inside the optimizer). Shapes never change: the
short last batch of an epoch is padded with a validity mask that the losses and
BatchNorm respect, and a chunk's fully padded tail steps are skipped. The same
function runs on one device or with its batch sharded over a ("data",) mesh.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax import config_lib
from lasp_jax.data import augment
from lasp_jax.data.arrays import Batch, DeviceData  # noqa: F401  (the step's inputs; defined with the data)
from lasp_jax.loop.train_state import TrainState, with_learning_rate
from lasp_jax.method import losses


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Static settings of the step (hashable)."""
  temperature: float
  base_temperature: float
  temp_cur: float
  temp_past: float
  ird_weight: float
  method: Any              # methods.Method: its distillation term (SD: IRD on the salient subset)
  past_bn: str             # "batch" (train-mode stats) or "running" (eval mode)
  domain_classes: int      # >0: SupCon label = label + domain_classes * tag of the sample's slot
  batch_size: int = 0      # the rows a step's augmentation draws for: a short tail step draws as its padded self


def loss_config(config, stream) -> LossConfig:
  """The step's static settings from a run's config and its stream (the contrastive label offset)."""
  t = config.train
  return LossConfig(temperature=t.temperature, base_temperature=t.base_temperature, temp_cur=t.ird_temp_cur,
                    temp_past=t.ird_temp_past, ird_weight=config_lib.ird_weight(config),
                    method=config_lib.method(config), past_bn=config.model.past_bn,
                    domain_classes=stream.contrastive_offset, batch_size=t.batch_size)


class PastModel(NamedTuple):
  params: Any
  batch_stats: Any


@jax.jit
def _copy(tree):
  return jax.tree.map(jnp.copy, tree)


def past_model(state: TrainState) -> PastModel:
  """A frozen copy of the state's weights and BatchNorm statistics, made by one program (eager copies
  compiled one per parameter shape). A copy: the train step donates, and so invalidates, the state's buffers."""
  return PastModel(*_copy((state.params, state.batch_stats)))


def contrastive_labels(labels, domain, cfg: LossConfig):
  return labels + cfg.domain_classes * domain if cfg.domain_classes else labels


# Per-step metrics, in this order (train.py reads them by name). z_norm: the mean L2 norm of the current
# model's embeddings over the valid rows; z_var: their total variance over their mean squared norm (1 for
# unit vectors spread evenly, 0 when every row is the same embedding); grad_norm: the global norm of the
# parameter gradient. A collapsed representation shows as z_var and grad_norm near 0 (health.py); a
# diverging one as z_norm growing without bound.
METRICS = ("loss", "supcon", "ird", "z_norm", "z_var", "grad_norm", "num_valid")


def _forward(model, variables, x, train: bool, mask):
  if train:
    (_, z), updates = model.apply(variables, x, train=True, mask=mask, mutable=["batch_stats"])
    return z, updates.get("batch_stats", {})
  _, z = model.apply(variables, x, train=False)
  return z, variables.get("batch_stats", {})


def _losses(params, state, past, dim_mask, views, labels, batch, model, cfg: LossConfig):
  row_valid = jnp.concatenate([batch.valid, batch.valid])
  z, new_stats = _forward(model, {"params": params, "batch_stats": state.batch_stats}, views, True, row_valid)
  supcon = losses.supcon_loss(features=z, labels=labels, is_current=batch.is_current, valid=batch.valid,
                              temperature=cfg.temperature, base_temperature=cfg.base_temperature)
  stats = _embedding_stats(jax.lax.stop_gradient(z).astype(jnp.float32), row_valid)
  if past is None:  # no IRD term at all: the program is then the same for every method (one compile, cached)
    return supcon, (supcon, jnp.zeros((), jnp.float32), stats, new_stats)
  z_past, _ = _forward(model, past._asdict(), views, cfg.past_bn == "batch", row_valid)
  kw = dict(z_cur=z, z_past=jax.lax.stop_gradient(z_past), temp_cur=cfg.temp_cur, temp_past=cfg.temp_past,
            valid=batch.valid)
  ird = cfg.method.distillation(dim_mask=dim_mask, **kw)
  total = supcon + cfg.ird_weight * ird
  return total, (supcon, ird, stats, new_stats)


def _embedding_stats(z, row_valid):
  """(mean L2 norm, total variance / mean squared norm) of the valid rows of z."""
  w = row_valid.astype(jnp.float32)[:, None]
  count = jnp.maximum(jnp.sum(w), 1.0)
  sq = jnp.sum(w * z * z) / count
  mean = jnp.sum(w * z, axis=0) / count
  z_norm = jnp.sum(w[:, 0] * jnp.linalg.norm(z, axis=-1)) / count
  return z_norm, (sq - jnp.sum(mean * mean)) / jnp.maximum(sq, 1e-30)


def train_step(state: TrainState, past: Optional[PastModel], dim_mask, data: DeviceData, batch: Batch, lr,
               *, model, tx, aug_cfg, cfg: LossConfig):
  """One SGD step; returns the new state and its METRICS."""
  key = jax.random.fold_in(state.rng, state.step)
  views = augment.two_views(key, data.images[batch.index], data.angles[batch.domain], aug_cfg, rows=cfg.batch_size)
  # Without the barrier XLA:CPU fuses the augmentation into the conv inputs and
  # recomputes it per use: 6x slower steps on the R-MNIST net (measured).
  views = jax.lax.optimization_barrier(views)
  labels = contrastive_labels(data.labels[batch.index], data.tags[batch.domain], cfg)
  grad_fn = jax.value_and_grad(_losses, has_aux=True)
  (loss, (supcon, ird, (z_norm, z_var), new_stats)), grads = grad_fn(state.params, state, past, dim_mask, views, labels,
                                                            batch, model, cfg)
  opt_state = with_learning_rate(state.opt_state, lr)
  updates, opt_state = tx.update(grads, opt_state, state.params)
  params = jax.tree.map(lambda p, u: p + u, state.params, updates)
  new = state.replace(step=state.step + 1, params=params, batch_stats=new_stats, opt_state=opt_state)
  num_valid = jnp.sum(batch.valid).astype(jnp.float32)
  return new, jnp.stack([loss, supcon, ird, z_norm, z_var, optax.tree.norm(grads), num_valid])


def chunk_body(model, tx, aug_cfg, cfg: LossConfig):
  """S steps, uncompiled: (state, past, mask, data, batches, lrs) -> (state, (S, len(METRICS))).

  The steps run in a loop whose trip count is the number of steps holding data:
  empty steps (valid all False) may only pad the chunk's tail, so an epoch's last,
  short chunk runs in the same program, skips its padding and returns zero metrics
  for it. A rolled loop, not an unrolled scan: on XLA:CPU it compiles 2-2.5x faster
  and runs as fast (R-MNIST net, batch 64 and 256, measured).
  """
  step = functools.partial(train_step, model=model, tx=tx, aug_cfg=aug_cfg, cfg=cfg)

  def chunk(state, past, dim_mask, data, batches, lrs):
    def body(i, carry):
      st, ms = carry
      new, m = step(st, past, dim_mask, data, jax.tree.map(lambda f: f[i], batches), lrs[i])
      return new, ms.at[i].set(m)
    num = jnp.sum(jnp.any(batches.valid, axis=-1))
    return jax.lax.fori_loop(0, num, body, (state, jnp.zeros((lrs.shape[0], len(METRICS)), jnp.float32)))

  return chunk


def make_chunk_fn(model, tx, aug_cfg, cfg: LossConfig, compiler_options=None, seeds: int = 0):
  """Compiled :func:`chunk_body` (the state is donated).

  ``seeds > 0``: the chunk of ``seeds`` runs at once, vmapped over a leading axis of
  the state, the past model, the SD mask, the batches and the data's angles (each
  seed draws its own rotations); images, labels and learning rates are shared.
  ``compiler_options``: XLA options for this program only (cpu_kernels.py).
  Equal arguments give the same jitted function: the runs of one process (a method
  and its baselines, the tests) then reuse its traced and compiled programs instead of
  tracing, lowering and loading them again (about 2 s a run for the tiny config).
  """
  return _chunk_fn(model, tx, aug_cfg, cfg, tuple(sorted((compiler_options or {}).items())), seeds)


@functools.lru_cache(maxsize=32)
def _chunk_fn(model, tx, aug_cfg, cfg, compiler_options: tuple, seeds: int):
  chunk = chunk_body(model, tx, aug_cfg, cfg)
  if seeds:
    chunk = jax.vmap(chunk, in_axes=(0, 0, 0, DeviceData(None, None, 0, None), 0, None))
  return jax.jit(chunk, donate_argnums=(0,), compiler_options=dict(compiler_options) or None)


def epoch_batches(pool: Batch, batch_size: int, steps_per_call: int, rng: np.random.Generator,
                  take: Optional[int] = None) -> Batch:
  """Shuffles the pool (task data + memory) into (calls, S, B) arrays with padding.

  ``take``: an epoch of only the first ``take`` samples of the shuffle (a
  fixed step budget over a larger pool: the joint baseline).
  """
  order = rng.permutation(len(pool.index))[:take]
  n = len(order)
  steps = -(-n // batch_size)
  calls = -(-steps // steps_per_call)
  total = calls * steps_per_call * batch_size
  out = []
  for field in pool:
    arr = np.zeros(total, np.asarray(field).dtype)
    arr[:n] = np.asarray(field)[order]
    out.append(arr.reshape(calls, steps_per_call, batch_size))
  valid = np.zeros(total, bool)
  valid[:n] = True
  out[3] = valid.reshape(calls, steps_per_call, batch_size)
  return Batch(*out)


def split_tail(chunks: list, lrs: list, multiple: int) -> tuple[list, list]:
  """An epoch's chunks (``Batch`` of (S, B) per field) and lrs with its short last step taken out into a chunk
  of its own, its valid rows padded to a multiple of ``multiple`` instead of to B.

  The same samples in the same step: the rows it drops are padding, and the step draws its augmentation
  for B rows (LossConfig.batch_size). A second program, and another float summation order in that step.
  """
  last = chunks[-1]
  j = int(np.sum(np.any(last.valid, axis=-1))) - 1  # the epoch's last step (empty steps only pad a chunk's end)
  rows = -(-int(np.sum(last.valid[j])) // multiple) * multiple
  if rows >= last.valid.shape[1]:
    return chunks, lrs
  tail = Batch(*[np.asarray(f)[j:j + 1, :rows] for f in last])
  head_chunks, head_lrs = chunks[:-1], lrs[:-1]
  if j:  # the last chunk keeps its other steps; the tail's step there becomes padding, which does not run
    valid = np.array(last.valid)
    valid[j] = False
    head_chunks, head_lrs = head_chunks + [last._replace(valid=valid)], head_lrs + [lrs[-1][:-1]]
  return head_chunks + [tail], head_lrs + [lrs[-1][-1:]]


def num_steps(pool_size: int, batch_size: int) -> int:
  return -(-pool_size // batch_size)


# ------------------------------------------------------------------------------ host side of the chunks

def pad_lrs(lrs: np.ndarray, steps: int) -> jax.Array:
  """A chunk's learning rates, zero-padded to its ``steps`` (the padded steps do not run)."""
  return jnp.asarray(np.pad(lrs, (0, steps - len(lrs))))


COLUMN = {name: i for i, name in enumerate(METRICS)}  # a metric's column in the step metrics


# Column layouts of step metrics saved by earlier versions (a partial epoch in a checkpoint still resumes).
_OLD_METRICS = {4: ("loss", "supcon", "ird", "num_valid"),
                6: ("loss", "supcon", "ird", "z_norm", "grad_norm", "num_valid")}


def step_metrics(rows) -> np.ndarray:
  """Step metrics as a (steps, len(METRICS)) array; a column an older checkpoint lacks is NaN."""
  a = np.asarray(rows, np.float32)
  width = a.shape[-1] if a.size else len(METRICS)
  if width != len(METRICS):
    old = a.reshape(-1, width)
    a = np.full((len(old), len(METRICS)), np.nan, np.float32)
    for i, name in enumerate(_OLD_METRICS[width]):
      a[:, COLUMN[name]] = old[:, i]
  return a.reshape(-1, len(METRICS))


def describe_step(m: np.ndarray, i: int) -> str:
  """Step i's losses and norms, for an error message."""
  row = dict(zip(METRICS, m[i]))
  return ", ".join(f"{k} {row[k]:.4g}" for k in ("supcon", "ird", "z_norm", "grad_norm"))


def checkpoint_due(chunk_lrs, k: int, every: int) -> bool:
  """Whether chunk k of an epoch (chunks of unequal length) crosses a multiple of ``every`` steps."""
  done = sum(len(x) for x in chunk_lrs[:k + 1])
  return done % every < len(chunk_lrs[k])
