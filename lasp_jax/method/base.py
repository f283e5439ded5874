"""What a continual-learning method is: the rules the shared loop calls without asking which method runs.

A method owns (mammoth's one file per method with its ``observe``, as JAX pieces):

* its objective: :meth:`Method.observe`, traced inside the compiled step, returns the gradients of its loss, its
  named metrics (``metrics``, "loss" first), the model's new BatchNorm statistics and its memory after the step;
  the loop applies the optimizer. A per-step gradient rule (A-GEM's projection) is part of ``observe``.
* the model part it trains (``head``: the projection head of the contrastive family, or a classifier);
* its device memory (:meth:`init_memory`): arrays carried in the train state, updated inside the step, saved with
  every checkpoint and stacked with vmapped seeds; the scenario's host memory of indices (changed at boundaries)
  feeds the probe and the contrastive family's replay pool;
* its training pool (:meth:`pool`) and what it does at a boundary (:meth:`at_boundary`);
* its read-out (:meth:`readout`: an evaluator's name, eval/evaluators.EVALUATORS).
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from lasp_jax.method import pools


class PastModel(NamedTuple):
  """A frozen copy of the weights and BatchNorm statistics (the model as a segment ended)."""
  params: Any
  batch_stats: Any


@jax.jit
def _copy(tree):
  return jax.tree.map(jnp.copy, tree)


def past_model(state) -> PastModel:
  """A frozen copy of the state's weights and BatchNorm statistics, made by one program (eager copies
  compiled one per parameter shape). A copy: the train step donates, and so invalidates, the state's buffers."""
  return PastModel(*_copy((state.params, state.batch_stats)))


class StepInputs(NamedTuple):
  """What one train step hands the method: the state, the frozen past model (or None), SD's dim mask, the
  device-resident training data, the step's batch of indices, its random key and learning rate."""
  state: Any
  past: Any
  dim_mask: jax.Array
  data: Any        # data.arrays.DeviceData
  batch: Any       # data.arrays.Batch of (B,) fields
  key: jax.Array
  lr: Any = None


class TaskData(NamedTuple):
  """What a method sees when a task ends: the task's own training samples (index into the images, slot, label),
  the device data, the model and its augmentation settings, the run's config and a seed for its draws."""
  task: int
  index: Any
  domain: Any
  labels: Any
  data: Any
  model: Any
  aug_cfg: Any
  config: Any
  num_tasks: int


class Observation(NamedTuple):
  """What a method's step returns to the loop: gradients (the optimizer is the loop's), the model's new
  BatchNorm statistics, the method's memory after the step and its metrics by name."""
  grads: Any
  batch_stats: Any
  memory: Any
  metrics: dict


def forward(model, variables, x, *, train: bool, mask=None):
  """(features, head output) and the BatchNorm statistics after the pass (train mode: updated on ``mask``)."""
  if train:
    out, updates = model.apply(variables, x, train=True, mask=mask, mutable=["batch_stats"])
    return out, updates.get("batch_stats", {})
  return model.apply(variables, x, train=False), variables.get("batch_stats", {})


def embedding_stats(z, row_valid):
  """(mean L2 norm, total variance / mean squared norm) of the valid rows of z: a collapsed representation shows
  as the second near 0 (eval/health.py), a diverging one as the first growing without bound."""
  w = row_valid.astype(jnp.float32)[:, None]
  count = jnp.maximum(jnp.sum(w), 1.0)
  sq = jnp.sum(w * z * z) / count
  mean = jnp.sum(w * z, axis=0) / count
  z_norm = jnp.sum(w[:, 0] * jnp.linalg.norm(z, axis=-1)) / count
  return z_norm, (sq - jnp.sum(mean * mean)) / jnp.maximum(sq, 1e-30)


class Method:
  """The rules every method answers; the defaults are a method with no memory, no past model and no look-ahead."""
  family: ClassVar[str] = ""
  head: ClassVar[str] = "projection"   # the model's head: "projection" (embeddings) or "classifier" (logits)
  metrics: ClassVar[tuple] = ("loss",)  # observe's metrics, in the order the step records them
  progress_keys: ClassVar[tuple] = ("loss",)  # the metrics a progress bar shows
  pool_replay: ClassVar[bool] = False  # the host memory (data/memory.py) joins the training pool
  distills: ClassVar[bool] = False    # keeps the past model at a boundary
  cumulative: ClassVar[bool] = False  # trains on every earlier task's data: needs given boundaries
  ird_weight: ClassVar[float] = 0.0   # the contrastive family's distillation weight (its published value)
  selective: ClassVar[bool] = False   # distils a searched subset of embedding dims (health: a degenerate mask)
  # Its loss rewards embedding scale without bound (SupCon on unnormalized embeddings), so health flags an embedding
  # norm far above the first epoch's. A classifier's features grow from their initial norm as they form (ER at d600:
  # 1.2 to 26 within task 0, then steady) and are not asked.
  norm_diverges: ClassVar[bool] = True
  modulates: ClassVar[bool] = False
  looks_ahead: ClassVar[bool] = False  # a boundary runs the look-ahead (mask search, EB)
  task_ends: ClassVar[bool] = False   # needs to know where each task ends (end_task): given boundaries only
  scenarios: ClassVar[tuple] = ("class", "domain")  # the data.scenario values it is defined for
  published_srs_data: ClassVar[dict] = {}  # the look-ahead data of the published commands, per scenario
  keeps_exemplars: ClassVar[bool] = False  # its memory holds exemplar rows: method_args.exemplars applies

  def distillation_weight(self, config) -> float:
    """lambda: ``train.ird_weight``, or the method's published value where it is < 0; 0 for a method that does
    not distil."""
    w = config.train.ird_weight
    if not self.distills:
      return 0.0
    return self.ird_weight if w is None or w < 0 else float(w)

  def settings(self, config, stream):
    """The step's static settings (hashable; ``.method`` is this object): what ``observe`` reads as ``cfg``."""
    raise NotImplementedError

  def observe(self, s: StepInputs, *, model, aug_cfg, cfg) -> Observation:
    """One step's gradients, statistics, memory and metrics (traced inside the compiled step)."""
    raise NotImplementedError

  def init_memory(self, config, stream, *, model=None, image_shape=()) -> Any:
    """The method's device memory before the first step (a pytree; {}: none). ``model``, ``image_shape``: the run's
    network and one training image's shape, for a memory of features or of images of its own."""
    del config, stream, model, image_shape
    return {}

  def at_boundary(self, rs, state, past, look, *, task: int):
    """What the method does when a segment opens, after the host memory update (loop/boundary.py): returns the
    train state and past model the next segment trains with, and the look-ahead's result (None: it ran none).
    ``look()`` runs the look-ahead on the model as it ended the segment before."""
    del rs, look, task
    return state, past_model(state) if self.distills else past, None

  def end_task(self, state, past, task: TaskData):
    """The train state after task ``task.task`` ends, before its read-outs (a memory written at task ends fills
    here). Default: unchanged."""
    del past, task
    return state

  def pool(self, stream, memory, t: int, slot=None, state=None):
    """Task t's training pool and the samples of one epoch: the task's data and the host memory (``pool_replay``), or
    the task's data alone. ``state``: the train state (a method whose device memory joins its pool reads it)."""
    del state
    if self.pool_replay:
      pool = pools.training_pool(stream, memory, t, slot)
      return pool, len(pool.index)
    own = pools.task_pool(stream, t, slot)
    return own, len(own.index)

  def readout(self, config) -> str:
    """The evaluator that scores the run after a task (eval/evaluators.EVALUATORS): the probe ``eval.probe``
    names on the frozen encoder."""
    return config.eval.probe

  def reference_values(self, chunks, config) -> dict:
    """An epoch's degenerate reference values of its loss terms (health checks compare the curves to them)."""
    del chunks, config
    return {}
