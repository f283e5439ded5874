"""The compiled train step, looped over a chunk of steps; it knows no method by name.

One step = the method's ``observe`` (method/base.py: its objective, traced here; its gradients, BatchNorm
statistics, device memory and named metrics), then the optimizer update (GM inside the optimizer). Shapes never
change: the short last batch of an epoch is padded with a validity mask that the losses and BatchNorm respect, and
a chunk's fully padded tail steps are skipped. The same function runs on one device or with its batch sharded over
a ("data",) mesh.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax.data.arrays import Batch, DeviceData  # noqa: F401  (the step's inputs; defined with the data)
from lasp_jax.loop.train_state import TrainState
from lasp_jax.method.base import PastModel, StepInputs
from lasp_jax.platform.optim import with_learning_rate

# The loop's own per-step metrics, after the method's (Method.metrics): grad_norm, the global norm of the
# parameter gradient the optimizer received (near 0 for a collapsed representation, eval/health.py); num_valid,
# the step's real rows (the weights of an epoch's means).
LOOP_METRICS = ("grad_norm", "num_valid")


def metric_names(method) -> tuple:
  """The columns of a method's step metrics."""
  return (*method.metrics, *LOOP_METRICS)


def train_step(state: TrainState, past: Optional[PastModel], dim_mask, data: DeviceData, batch: Batch, lr,
               *, model, tx, aug_cfg, cfg):
  """One SGD step of the method ``cfg.method``; returns the new state and its metrics (metric_names)."""
  key = jax.random.fold_in(state.rng, state.step)
  obs = cfg.method.observe(StepInputs(state, past, dim_mask, data, batch, key, lr), model=model, aug_cfg=aug_cfg,
                           cfg=cfg)
  opt_state = with_learning_rate(state.opt_state, lr)
  updates, opt_state = tx.update(obs.grads, opt_state, state.params)
  params = jax.tree.map(lambda p, u: p + u, state.params, updates)
  new = state.replace(step=state.step + 1, params=params, batch_stats=obs.batch_stats, opt_state=opt_state,
                      memory=obs.memory)
  num_valid = jnp.sum(batch.valid).astype(jnp.float32)
  return new, jnp.stack([*(obs.metrics[k] for k in cfg.method.metrics), optax.tree.norm(obs.grads), num_valid])


def chunk_body(model, tx, aug_cfg, cfg):
  """S steps, uncompiled: (state, past, mask, data, batches, lrs) -> (state, (S, metric columns)).

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
    width = len(metric_names(cfg.method))
    return jax.lax.fori_loop(0, num, body, (state, jnp.zeros((lrs.shape[0], width), jnp.float32)))

  return chunk


def make_chunk_fn(model, tx, aug_cfg, cfg, compiler_options=None, seeds: int = 0):
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


# Column layouts of step metrics saved by earlier versions (a partial epoch in a checkpoint still resumes).
_OLD_METRICS = {4: ("loss", "supcon", "ird", "num_valid"),
                6: ("loss", "supcon", "ird", "z_norm", "grad_norm", "num_valid")}


def step_metrics(rows, names: tuple) -> np.ndarray:
  """Step metrics as a (steps, len(names)) array; a column an older checkpoint lacks is NaN."""
  a = np.asarray(rows, np.float32)
  width = a.shape[-1] if a.size else len(names)
  if width != len(names):
    old = a.reshape(-1, width)
    a = np.full((len(old), len(names)), np.nan, np.float32)
    for i, name in enumerate(_OLD_METRICS[width]):
      a[:, names.index(name)] = old[:, i]
  return a.reshape(-1, len(names))


def describe_step(m: np.ndarray, i: int, names: tuple) -> str:
  """Step i's losses and norms, for an error message."""
  row = dict(zip(names, m[i]))
  return ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k not in ("loss", "num_valid"))


def checkpoint_due(chunk_lrs, k: int, every: int) -> bool:
  """Whether chunk k of an epoch (chunks of unequal length) crosses a multiple of ``every`` steps."""
  done = sum(len(x) for x in chunk_lrs[:k + 1])
  return done % every < len(chunk_lrs[k])
