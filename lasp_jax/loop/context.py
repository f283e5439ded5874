"""A run as two values: :class:`Context`, what it builds once from its config, and :class:`Carry`, what changes.

Every function below the task loop (epochs.py, boundary.py, seeds.py, the evaluators' inputs) takes these values
and nothing else of the run; none calls back into the loop. The carry's device state (``state``, ``past``,
``data``) is replaced, never mutated; its host record ``rs`` (run_state.RunState) is updated in place, as a
checkpoint saves it.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from typing import Any, Optional

import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lasp_jax import config_lib, progress
from lasp_jax.data import streams
from lasp_jax.errors import ConfigError
from lasp_jax.eval import probe
from lasp_jax.loop import checkpoint, steps
from lasp_jax.loop.run_state import RunState
from lasp_jax.loop.steps import DeviceData
from lasp_jax.loop.train_state import TrainState, create_train_state, make_optimizer
from lasp_jax.method import pools
from lasp_jax.method.base import Method, PastModel, TaskData
from lasp_jax.model.models import build_model
from lasp_jax.platform import clock, cpu_kernels


def data_mesh(devices=None) -> Mesh:
  """A 1-D ("data",) mesh over ``devices`` (default: all; one device is a mesh of one)."""
  return Mesh(np.asarray(jax.devices() if devices is None else devices), ("data",))


@dataclasses.dataclass(frozen=True)
class Parts:
  """The model, the optimizer, the augmentation and the method's step settings, and the XLA options of the run's
  programs."""
  model: Any                      # models.py: a flax module
  tx: Any                         # optax.GradientTransformation (train_state.make_optimizer)
  aug_cfg: Any                    # augment.AugmentConfig
  loss_cfg: Any                   # the method's step settings (Method.settings; hashable, .method the method)
  compiler_options: tuple         # cpu_kernels.compiler_options

  @classmethod
  def build(cls, config, stream) -> "Parts":
    method = config_lib.method(config)
    return cls(build_model(config, head=method.head, num_classes=stream.num_classes),
               make_optimizer(momentum=config.train.momentum, weight_decay=config.train.weight_decay),
               config_lib.augment_config(config, rotate=stream.rotates), method.settings(config, stream),
               cpu_kernels.compiler_options(cpu_kernels.of_model(config.model)))


@dataclasses.dataclass(frozen=True)
class Context:
  """What a run builds once: its config and method, workdir and checkpointer, data and stream, parts, the
  ("data",) mesh and its shardings, the test (and validation) images on the device."""
  config: ml_collections.ConfigDict
  method: Method
  workdir: Any                    # pathlib.Path
  ckpt: checkpoint.Checkpointer
  dataset: Any                    # data.arrays.ArrayDataset
  stream: Any                     # data.streams.TaskStream (or TaskFree)
  parts: Parts
  mesh: Mesh
  replicated: NamedSharding
  batch_sharding: NamedSharding   # (steps_per_call, B): the batch axis over "data"
  train_images: jax.Array
  train_labels: jax.Array
  test_data: DeviceData
  validation: Optional[tuple]     # (stream, DeviceData) of the held-out digits, or None

  model = property(lambda self: self.parts.model)
  tx = property(lambda self: self.parts.tx)
  aug_cfg = property(lambda self: self.parts.aug_cfg)
  loss_cfg = property(lambda self: self.parts.loss_cfg)
  compiler_options = property(lambda self: self.parts.compiler_options)

  @property
  def metric_names(self) -> tuple:
    """The columns of the step metrics: the method's, then the loop's (steps.metric_names)."""
    return steps.metric_names(self.method)

  @functools.cached_property
  def chunk_fn(self):
    """The compiled chunk of train steps (built on first use: seeds trained as one vmapped program never do)."""
    p = self.parts
    return steps.make_chunk_fn(p.model, p.tx, p.aug_cfg, p.loss_cfg, compiler_options=p.compiler_options)

  def put(self, x, dtype=None) -> jax.Array:
    return jax.device_put(np.asarray(x, dtype), self.replicated)

  def task_epochs(self, t: int) -> int:
    """The passes the stream makes over task t's data."""
    return self.config.train.epochs_first if t == 0 else self.config.train.epochs


@dataclasses.dataclass
class Carry:
  """What a run changes as it goes: the host record ``rs``, the train state, the past model (methods that
  distil, after the first boundary), the training images' device data (its slot tables grow with the slots);
  and this process's clocks and TensorBoard writer."""
  rs: RunState
  state: TrainState
  past: Optional[PastModel]
  data: DeviceData
  started: float = dataclasses.field(default_factory=time.perf_counter)
  compile_start: float = dataclasses.field(default_factory=clock.compile_seconds)
  writer: Any = None

  @property
  def memory(self):
    return self.rs.memory.get()


def build(config: ml_collections.ConfigDict, workdir, devices=None) -> Context:
  """The context of ``config``'s run in ``workdir`` (checked: ConfigError names a bad setting)."""
  config = config_lib.resolved(config)
  config_lib.validate(config)
  progress.enable(config.progress)
  existed = pathlib.Path(workdir).exists()
  workdir = checkpoint.prepare_workdir(workdir)
  try:
    dataset, stream = streams.load(config)
  except ConfigError:  # a setting the data refuses (10 classes in 7 tasks): no empty workdir left behind
    if not existed and not any(workdir.iterdir()):
      workdir.rmdir()
    raise
  mesh = data_mesh(devices)
  for key in ("batch_size", "tail_multiple"):
    if config.train[key] % mesh.size:
      raise ConfigError(f"train.{key} {config.train[key]} is not divisible by the {mesh.size} devices of the "
                        f"data mesh")
  rep = NamedSharding(mesh, P())
  put = lambda x, dtype=None: jax.device_put(np.asarray(x, dtype), rep)
  held = lambda s, images: DeviceData(put(images), put(s.test_labels), put(s.test_angles, np.float32),
                                      put(np.arange(s.num_tasks), np.int32))
  vs = streams.validation_stream(dataset, config)
  return Context(config=config, method=config_lib.method(config), workdir=workdir,
                 ckpt=checkpoint.Checkpointer(workdir), dataset=dataset, stream=stream,
                 parts=Parts.build(config, stream), mesh=mesh, replicated=rep,
                 batch_sharding=NamedSharding(mesh, P(None, "data")), train_images=put(dataset.train_images),
                 train_labels=put(stream.train_labels), test_data=held(stream, dataset.test_images),
                 validation=None if vs is None else (vs, held(vs, dataset.validation_images)))


def fresh(ctx: Context) -> Carry:
  """The carry before the first step: initial weights (built on the default device, then replicated: one init
  program whatever the mesh), no past model, the stream's initial slots."""
  c = ctx.config
  sample_shape = (2,) + tuple(ctx.dataset.train_images.shape[1:])
  state = create_train_state(ctx.model, ctx.tx, sample_shape, c.seed)
  memory = ctx.method.init_memory(c, ctx.stream, model=ctx.model, image_shape=sample_shape[1:])
  state = jax.device_put(state.replace(memory=memory), ctx.replicated)
  rs = RunState.fresh(ctx.stream, c.model.embedding_dim)
  return Carry(rs=rs, state=state, past=None, data=slot_data(ctx, rs))


def slot_data(ctx: Context, rs: RunState) -> DeviceData:
  """The training images' device data with the slot tables (rotation angle, contrastive tag of every slot)."""
  angles, tags = jax.device_put(rs.slot_tables(ctx.stream), ctx.replicated)
  return DeviceData(ctx.train_images, ctx.train_labels, angles, tags)


def slot(ctx: Context, carry: Carry, t: int) -> int:
  """The slot of task t's samples in the current segment (a new slot when the pair is new: the tables grow)."""
  index, grew = carry.rs.slot(ctx.stream, t)
  if grew:
    carry.data = slot_data(ctx, carry.rs)
  return index


def embed(ctx: Context, carry: Carry, index, domain) -> np.ndarray:
  """Eval-mode embeddings of training images at their domains' rotations (what a detector is handed)."""
  view = carry.data._replace(angles=ctx.put(ctx.stream.angles, np.float32))
  return np.asarray(probe.extract_features(ctx.model, carry.state.variables(), view, np.asarray(index),
                                           np.asarray(domain), ctx.aug_cfg, batch_size=len(index),
                                           kind="embedding"))


def task_data(ctx: Context, carry: Carry, t: int) -> TaskData:
  """Task t's own samples and what a method needs to read them (Method.end_task)."""
  own = pools.task_pool(ctx.stream, t)
  return TaskData(t, own.index, own.domain, ctx.stream.train_labels[own.index], carry.data, ctx.model, ctx.aug_cfg,
                  ctx.config, ctx.stream.num_tasks)


def timed(carry: Carry, phase: str, fn, *args):
  """Runs fn(*args), adding its wall seconds (device work finished) to the phase's total; returns its result."""
  t0, c0 = time.perf_counter(), clock.compile_seconds()
  out = fn(*args)
  jax.block_until_ready(carry.state.params)
  clock.add(carry.rs.timing, phase, time.perf_counter() - t0)
  clock.add(carry.rs.timing, phase.removesuffix("_s") + "_compile_s", clock.compile_seconds() - c0)  # of it
  return out


def _trees(carry: Carry) -> dict:
  return {"state": carry.state, "past": carry.past or PastModel(carry.state.params, carry.state.batch_stats)}


def save(ctx: Context, carry: Carry) -> None:
  """A checkpoint of the carry (its device trees and the run state, with the wall time so far)."""
  with clock.Phase(carry.rs.timing, "checkpoint_s"):
    meta = dict(carry.rs.to_meta(), has_past=carry.past is not None)
    meta["wall_time_s"] = carry.rs.wall_time_s + (time.perf_counter() - carry.started)
    ctx.ckpt.save(_trees(carry), meta)


def restore(ctx: Context, like: Carry) -> Optional[Carry]:
  """The carry of the workdir's newest readable checkpoint if ``config.resume`` allows (checkpoint.may_resume),
  else None; ``like``: a carry of the same shapes (a fresh one)."""
  if not checkpoint.may_resume(ctx.ckpt, ctx.workdir, ctx.config):
    return None
  trees, meta = ctx.ckpt.restore(jax.tree.map(np.asarray, _trees(like)))
  past = PastModel(*jax.device_put(tuple(trees["past"]), ctx.replicated)) if meta.pop("has_past") else None
  rs = RunState.from_meta(meta, ctx.stream, ctx.task_epochs)
  return dataclasses.replace(like, rs=rs, state=jax.device_put(trees["state"], ctx.replicated), past=past,
                             data=slot_data(ctx, rs))
