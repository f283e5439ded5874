"""The host-side state of a run: every value besides the device arrays that a checkpoint carries.

A :class:`RunState` is plain data (lists, dicts, numbers): :meth:`RunState.to_meta` is the checkpoint's JSON
metadata and :meth:`RunState.from_meta` reads it back, including checkpoints written before the learner had
segments (their boundaries were the tasks').
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from lasp_jax.data import memory as memory_lib


@dataclasses.dataclass
class Progress:
  """Where the run is: the task and epoch next to train, the chunk next to run in it, whether the epoch's
  boundary work is done, the epoch's metrics so far (a mid-epoch checkpoint) and the task's largest lr."""
  task: int = 0
  epoch: int = 0
  call: int = 0
  boundary_done: bool = False
  partial: list = dataclasses.field(default_factory=list)
  lr_max: float = 0.0


@dataclasses.dataclass
class Segment:
  """The learner's current segment (a task as it knows it): its index, epochs trained in it, the (task, slot)
  pairs whose data it trained on, and how many stream samples the segments before it trained on."""
  index: int = 0
  epoch: int = 0
  passes: list = dataclasses.field(default_factory=list)
  seen: int = 0


@dataclasses.dataclass
class Detection:
  """A task-free stream's detector: labels seen, the previous pass's window, every observation, detections."""
  seen: list = dataclasses.field(default_factory=list)
  previous: Optional[dict] = None
  observations: list = dataclasses.field(default_factory=list)
  detected: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class MemoryRecord:
  indices: list = dataclasses.field(default_factory=list)
  tasks: list = dataclasses.field(default_factory=list)

  def get(self) -> memory_lib.Memory:
    return memory_lib.Memory(np.asarray(self.indices, np.int64), np.asarray(self.tasks, np.int64))

  @classmethod
  def of(cls, mem: memory_lib.Memory) -> "MemoryRecord":
    return cls(mem.indices.tolist(), mem.tasks.tolist())


def table_size(slots: int) -> int:
  """The length of the device's slot tables for a stream of ``slots`` slots: 8, 16, 32, ... Runs that differ
  only in their number of tasks, or in given against detected boundaries, then share their compiled programs
  (the tables are only gathered from, so the padding changes no result)."""
  return max(8, 1 << (slots - 1).bit_length())


@dataclasses.dataclass
class RunState:
  """Everything a run records and resumes from, besides its device arrays."""
  progress: Progress
  segment: Segment
  memory: MemoryRecord
  mask: list                 # SD's subset of embedding dims (all True until a search)
  acc: dict                  # metric -> A[t][j] accuracy rows (None: not measured)
  overall: dict              # metric -> overall accuracy after each task
  probe_epoch: list
  slots: list                # (domain, contrastive tag) of every slot the learner has used
  boundaries: list = dataclasses.field(default_factory=list)   # one record per opened segment
  curves: list = dataclasses.field(default_factory=list)       # one row per trained epoch
  pass_log: list = dataclasses.field(default_factory=list)     # (task, epoch, first step, steps) of every pass
  steps_done: int = 0
  wall_time_s: float = 0.0
  health: list = dataclasses.field(default_factory=list)       # flags (health.Flag as dicts)
  timing: dict = dataclasses.field(default_factory=dict)       # phase -> seconds
  extra: list = dataclasses.field(default_factory=list)        # what on_task_end hooks returned
  baselines: dict = dataclasses.field(default_factory=dict)
  readouts: dict = dataclasses.field(default_factory=dict)     # eval.final_readouts on the test images
  validation: dict = dataclasses.field(default_factory=dict)   # read-outs on the validation images
  detection: Detection = dataclasses.field(default_factory=Detection)

  @classmethod
  def fresh(cls, stream, embedding_dim: int) -> "RunState":
    t = stream.num_tasks
    return cls(progress=Progress(), segment=Segment(), memory=MemoryRecord(), mask=[True] * embedding_dim,
               acc={n: [[None] * t for _ in range(t)] for n in stream.metrics},
               overall={n: [None] * t for n in stream.metrics}, probe_epoch=[None] * t,
               slots=stream.initial_slots())

  def to_meta(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_meta(cls, meta: dict, stream, task_epochs) -> "RunState":
    """The state a checkpoint's metadata holds; ``task_epochs(t)``: the epochs of task t (for checkpoints
    written before segments existed)."""
    meta = dict(meta)
    if "segment" not in meta:
      meta = _with_segments(meta, stream, task_epochs)
    parts = {"progress": Progress, "segment": Segment, "memory": MemoryRecord, "detection": Detection}
    known = {f.name for f in dataclasses.fields(cls)}
    kw = {k: (parts[k](**v) if k in parts else v) for k, v in meta.items() if k in known}
    return cls(**kw)

  def slot_tables(self, stream) -> tuple[np.ndarray, np.ndarray]:
    """The rotation angle and contrastive tag of every slot, padded to ``table_size`` of the stream's capacity."""
    size = table_size(stream.slot_capacity)
    angles, tags = np.zeros(size, np.float32), np.zeros(size, np.int32)
    for i, (domain, tag) in enumerate(self.slots):
      angles[i], tags[i] = stream.angles[domain], tag
    return angles, tags

  def record_readout(self, t: int, res) -> None:
    """A read-out after task t (probe.ProbeResult): its accuracy rows, overall figures and epoch."""
    for name, row in res.per_task.items():
      self.acc[name][t] = [None if not np.isfinite(v) else float(v) for v in row]
      self.overall[name][t] = res.overall[name]
    self.probe_epoch[t] = res.epoch

  def slot(self, stream, t: int) -> tuple[int, bool]:
    """The slot of task t's samples in the current segment, and whether the table grew (a new pair)."""
    key = list(stream.slot_key(t, self.segment.index))
    if key in self.slots:
      return self.slots.index(key), False
    self.slots.append(key)
    return len(self.slots) - 1, True


def _with_segments(meta: dict, stream, task_epochs) -> dict:
  """A checkpoint written before the learner had segments (its boundaries were the tasks'), given them."""
  p = meta["progress"]
  t = p["task"] if p["epoch"] or p["boundary_done"] else max(p["task"] - 1, 0)  # the task now in training
  segment = {"index": t, "epoch": p["epoch"] if t == p["task"] else task_epochs(t),
             "passes": [[t, stream.task_domain(t)]], "seen": t * len(stream.train_indices(0))}
  return {**meta, "segment": segment, "slots": stream.initial_slots(), "steps_done": 0, "pass_log": []}
