"""``train_and_evaluate``: a whole continual-learning run, resumable at any step.

Per task t: its epochs (epochs.train_task: before an epoch the learner may open a segment, boundary.py:
memory, past model, look-ahead); the read-out (every task, or the last); a checkpoint. All randomness derives
from (seed, segment, epoch, step), so a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from typing import Any, Optional

import jax
import ml_collections
import numpy as np
import tqdm
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lasp_jax import (
  boundary,
  checkpoint,
  clock,
  config_lib,
  cpu_kernels,
  epochs,
  evaluate,
  lookahead,
  probe,
  progress,
  provenance,
  report,
  steps,
)
from lasp_jax.data import streams
from lasp_jax.errors import ConfigError
from lasp_jax.models import build_model
from lasp_jax.run_state import RunState
from lasp_jax.steps import DeviceData, PastModel
from lasp_jax.train_state import TrainState, create_train_state, make_optimizer


def data_mesh(devices=None) -> Mesh:
  """A 1-D ("data",) mesh over ``devices`` (default: all; one device is a mesh of one)."""
  return Mesh(np.asarray(jax.devices() if devices is None else devices), ("data",))


@dataclasses.dataclass(frozen=True)
class Parts:
  """What a run builds once from its config: the model, the optimizer, the augmentation and loss settings, and
  the XLA options of its programs (cpu_kernels.py)."""
  model: Any
  tx: Any
  aug_cfg: Any
  loss_cfg: steps.LossConfig
  compiler_options: Any

  @classmethod
  def build(cls, config, stream) -> "Parts":
    return cls(build_model(config), make_optimizer(momentum=config.train.momentum,
                                                   weight_decay=config.train.weight_decay),
               config_lib.augment_config(config, rotate=stream.rotates), steps.loss_config(config, stream),
               cpu_kernels.compiler_options(cpu_kernels.of_model(config.model)))


class ContinualRun(epochs.Learner):
  """One run: its parts, host state ``rs`` (run_state.RunState), device state ``state``/``past``, checkpoints."""

  def __init__(self, config: ml_collections.ConfigDict, workdir, devices=None, on_task_end=None):
    """``on_task_end(run, t)`` may return a JSON-able dict stored under results['extra']."""
    self.config = config = config_lib.resolved(config)
    config_lib.validate(config)
    self.method, self.on_task_end = config_lib.method(config), on_task_end
    progress.enable(config.progress)
    self.workdir = checkpoint.prepare_workdir(workdir)
    self.dataset, self.stream = streams.load(config)
    self.parts = Parts.build(config, self.stream)
    self.mesh = data_mesh(devices)
    for key in ("batch_size", "tail_multiple"):
      if config.train[key] % self.mesh.size:
        raise ConfigError(f"train.{key} {config.train[key]} is not divisible by the {self.mesh.size} devices of the "
                          f"data mesh")
    self.replicated = NamedSharding(self.mesh, P())
    self.batch_sharding = NamedSharding(self.mesh, P(None, "data"))
    s, put = self.stream, lambda x, dtype=None: jax.device_put(np.asarray(x, dtype), self.replicated)
    self.rs = RunState.fresh(s, config.model.embedding_dim)
    self.data = DeviceData(put(self.dataset.train_images), put(s.train_labels), None, None)
    self._put_slots()  # the training images' angles and tags are per slot; the test copies' per task
    held = lambda stream, images: DeviceData(put(images), put(stream.test_labels), put(stream.test_angles, np.float32),
                                             put(np.arange(stream.num_tasks), np.int32))
    self.test_data = held(s, self.dataset.test_images)
    vs = streams.validation_stream(self.dataset, config)  # (stream, device data) of the validation images
    self.validation = None if vs is None else (vs, held(vs, self.dataset.validation_images))
    # Built on the default device, then replicated: one init program whatever the mesh.
    sample_shape = (2,) + tuple(self.dataset.train_images.shape[1:])
    self.state: TrainState = jax.device_put(create_train_state(self.model, self.tx, sample_shape, config.seed),
                                            self.replicated)
    self.past: Optional[PastModel] = None
    self.ckpt, self.writer = checkpoint.Checkpointer(self.workdir), None

  model = property(lambda self: self.parts.model)
  tx = property(lambda self: self.parts.tx)
  aug_cfg = property(lambda self: self.parts.aug_cfg)
  loss_cfg = property(lambda self: self.parts.loss_cfg)
  compiler_options = property(lambda self: self.parts.compiler_options)
  memory = property(lambda self: self.rs.memory.get())

  # ---------------------------------------------------------------- state, slots, checkpoints
  def _trees(self) -> dict:
    return {"state": self.state, "past": self.past or PastModel(self.state.params, self.state.batch_stats)}

  def save(self) -> None:
    with clock.Phase(self.rs.timing, "checkpoint_s"):
      meta = dict(self.rs.to_meta(), has_past=self.past is not None)
      meta["wall_time_s"] = self.rs.wall_time_s + (time.perf_counter() - self._t_start)
      self.ckpt.save(self._trees(), meta)

  def maybe_restore(self) -> bool:
    """Restores the workdir's newest readable checkpoint if ``config.resume`` allows (checkpoint.may_resume)."""
    if not checkpoint.may_resume(self.ckpt, self.workdir, self.config):
      return False
    trees, meta = self.ckpt.restore(jax.tree.map(np.asarray, self._trees()))
    self.state = jax.device_put(trees["state"], self.replicated)
    self.past = PastModel(*jax.device_put(tuple(trees["past"]), self.replicated)) if meta.pop("has_past") else None
    self.rs = RunState.from_meta(meta, self.stream, self.task_epochs)
    self._put_slots()
    return True

  def _put_slots(self) -> None:
    """The device's slot tables (rotation angle and contrastive tag of every slot) from the run state's slots."""
    angles, tags = jax.device_put(self.rs.slot_tables(self.stream), self.replicated)
    self.data = self.data._replace(angles=angles, tags=tags)

  def slot(self, t: int) -> int:
    """The slot of task t's samples in the current segment (a new slot when the pair is new)."""
    index, grew = self.rs.slot(self.stream, t)
    if grew:
      self._put_slots()
    return index

  def embed(self, index, domain) -> np.ndarray:
    """Eval-mode embeddings of training images at their domains' rotations (what a detector is handed)."""
    view = self.data._replace(angles=jax.device_put(np.asarray(self.stream.angles, np.float32), self.replicated))
    return np.asarray(probe.extract_features(self.model, self.state.variables(), view, np.asarray(index),
                                             np.asarray(domain), self.aug_cfg, batch_size=len(index),
                                             kind="embedding"))

  # ---------------------------------------------------------------- a task
  def open_segment(self, t: int) -> None:
    """A new segment before the next epoch of task t (boundary.open_segment)."""
    look = lambda k, mem, pool: lookahead.at_boundary(k, mem, pool, config=self.config, stream=self.stream,
                                                      parts=self.parts, variables=self.state.variables(),
                                                      data=self.data)
    self.state, self.past = boundary.open_segment(self.rs, t, config=self.config, stream=self.stream,
                                                  method=self.method, state=self.state, past=self.past,
                                                  slot=self.slot, lookahead=look)

  def readout_inputs(self) -> evaluate.Inputs:
    """The values every read-out reads, as they are now (evaluate.Inputs)."""
    return evaluate.Inputs(self.model, self.state.variables(), self.data, self.test_data, self.stream,
                           self.memory, self.aug_cfg, self.config, self.validation)

  def evaluate(self, t: int) -> probe.ProbeData:
    """The read-out ``eval.probe`` names, after task t (and raw pixels after the last); returns its data."""
    inputs = self.readout_inputs()
    pd = evaluate.probe_data(inputs, t)
    res = evaluate.EVALUATORS[self.config.eval.probe](inputs, t, pd)
    self.rs.record_readout(t, res)
    for name, value in res.overall.items():
      if self.writer:
        self.writer.add_scalar(f"probe/{name}", value, t)
    return pd

  def after_task(self, t: int) -> None:
    """The probe (after every task, or the last), the raw-pixel baseline, the task-end hook and checkpoint.

    The baseline has its own timing phase (``baselines_s``): ``probe_s`` is the work the published code also
    does, which the reference comparison sets side by side.
    """
    last = t == self.stream.num_tasks - 1
    if self.config.eval.every_task or last:
      checkpoint.fault_point(f"probe:{t}")
      pd = self.timed("probe_s", self.evaluate, t)
      if last and self.config.eval.raw_pixels:
        self.rs.baselines = {"raw_pixels": self.timed("baselines_s", functools.partial(
            evaluate.raw_pixels, self.readout_inputs(), pd=pd), t)}
      if last:
        self.rs.readouts, self.rs.validation = self.timed("probe_s", functools.partial(
            evaluate.final_readouts, self.readout_inputs(), pd=pd), t)
    if self.on_task_end is not None:
      self.rs.extra.append({"task": t, **(self.on_task_end(self, t) or {})})
    self.rs.progress = dataclasses.replace(self.rs.progress, task=t + 1, epoch=0, call=0, boundary_done=False,
                                           partial=[], lr_max=0.0)
    self.save()

  # ---------------------------------------------------------------- the run
  def start(self) -> None:
    """Restores a checkpoint if there is one, writes config.json, opens the TensorBoard writer."""
    self._t_start, self._compile_start = time.perf_counter(), clock.compile_seconds()
    resumed = self.maybe_restore()
    checkpoint.write_json_atomic(self.workdir / "config.json",
                                 {**config_lib.flat(self.config), "provenance": provenance.provenance()})
    if resumed:
      p = self.rs.progress
      tqdm.tqdm.write(f"resuming {self.workdir}: task {p.task}, epoch {p.epoch}, chunk {p.call}", file=sys.stderr)
    self.writer = report.tensorboard_writer(self.workdir)

  def run_task(self, t: int) -> None:
    charge_training([self], lambda t: epochs.train_task([self], t, epochs.OneRun()), t)
    self.after_task(t)

  def run(self) -> dict:
    self.start()
    for t in range(self.rs.progress.task, self.stream.num_tasks):
      self.run_task(t)
    return self.finish()

  def finish(self) -> dict:
    clock.add(self.rs.timing, "compile_s", clock.compile_seconds() - self._compile_start)  # inside the phases
    results = report.results(self.config, self.stream, self.rs,
                             wall_time_s=self.rs.wall_time_s + time.perf_counter() - self._t_start)
    checkpoint.write_json_atomic(self.workdir / "results.json", results)
    if self.config.pictures:
      report.run_pictures(results, self.workdir)
    if self.writer:
      self.writer.close()
    self.ckpt.close()
    return results


def charge_training(runs, train, t: int) -> None:
  """Runs ``train(t)`` (task t's epochs of ``runs``) and adds its wall seconds, less the boundaries it ran
  (their own phase, ``boundary_s``), to every run's ``train_s``: a shared program's time is every seed's."""
  before = [(r.rs.timing.get("boundary_s", 0.0), r.rs.timing.get("boundary_compile_s", 0.0)) for r in runs]
  t0, c0 = time.perf_counter(), clock.compile_seconds()
  train(t)
  jax.block_until_ready([r.state.params for r in runs])
  spent = sum(r.rs.timing.get("boundary_s", 0.0) - b for r, (b, _) in zip(runs, before))
  compiled = clock.compile_seconds() - c0 - sum(r.rs.timing.get("boundary_compile_s", 0.0) - bc
                                                for r, (_, bc) in zip(runs, before))
  elapsed = time.perf_counter() - t0 - spent
  for r in runs:
    clock.add(r.rs.timing, "train_s", elapsed)
    clock.add(r.rs.timing, "train_compile_s", compiled)  # of train_s


def train_and_evaluate(config: ml_collections.ConfigDict, workdir) -> dict:
  """Runs (or resumes) the continual run described by ``config`` in ``workdir``; returns its results.json."""
  return ContinualRun(config, workdir).run()
