"""Continual-learning scenarios: the task stream and everything that depends on its kind.

A scenario is one object. :class:`ClassIncremental` splits the classes into tasks
(task t owns the contiguous labels ``[t * cpt, (t + 1) * cpt)`` of ``class_order``;
Task-IL restricts a prediction to that block); :class:`DomainIncremental` keeps
every class in every task and gives each task a rotation angle (Rotated MNIST).
Each owns what differs between them: which samples a task trains and tests on, each
sample's domain, the replay memory's policy, the contrastive labels, whether views
are rotated, the probe's balancing and test layout, and the metric names. Outside
this module only config validation reads the scenario's name.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import ClassVar, Optional

import numpy as np
import tqdm

from lasp_jax.data import detectors, sources
from lasp_jax.data import memory as memory_lib
from lasp_jax.data.sources import ArrayDataset
from lasp_jax.errors import ConfigError


@dataclasses.dataclass
class TaskStream:
  """The task sequence: labels, angles and the scenario's rules (subclasses)."""
  num_tasks: int
  num_classes: int                # classes the classifier predicts
  classes_per_task: int
  train_labels: np.ndarray        # (N,) labels after relabelling
  test_labels: np.ndarray
  angles: np.ndarray              # (num_tasks,) degrees; zeros for class-IL
  test_angles: np.ndarray         # (num_tasks,) angle applied to task j's test copy
  class_order: np.ndarray

  scenario: ClassVar[str]
  default_detector: ClassVar[str]  # the boundary detector of config.detection.detector='auto' (detectors.py)
  metrics: ClassVar[tuple]        # the accuracy metrics a probe reports, in results.json's order
  rotates: ClassVar[bool]         # views are rotated by their sample's domain angle
  probe_crops_current: ClassVar[bool]  # the probe re-augments the current task's rows (else rotate only)

  def task_classes(self, t: int) -> np.ndarray:
    raise NotImplementedError

  def train_indices(self, t: int) -> np.ndarray:
    """Training-set indices of task t's own data."""
    raise NotImplementedError

  def test_indices(self, t: int) -> np.ndarray:
    raise NotImplementedError

  def task_domain(self, t: int) -> int:
    """The domain (rotation) of task t's samples."""
    raise NotImplementedError

  @property
  def contrastive_offset(self) -> int:
    """SupCon's label is ``label + offset * domain``: 0, or the class count when domains are classes too."""
    raise NotImplementedError

  @property
  def num_contrastive_classes(self) -> int:
    raise NotImplementedError

  def update_memory(self, memory: memory_lib.Memory, *, task: int, capacity: int, seed: int,
                    previous=None, seen: int = 0) -> memory_lib.Memory:
    """The replay memory for training segment ``task`` >= 1, built from the one before.

    ``previous``: the stream samples the segment before trained on (a ``pools`` Batch; its domain field is
    each sample's slot), ``seen`` the stream samples of the segments before that; ``None``: task ``task - 1``.
    """
    raise NotImplementedError

  def slot_key(self, t: int, segment: int) -> tuple[int, int]:
    """(domain, contrastive tag) of task t's samples trained in the learner's segment ``segment``."""
    raise NotImplementedError

  def initial_slots(self) -> list:
    """The slot table a run starts from: slot d is domain d with tag ``slot_key``'s (given boundaries)."""
    return [list(self.slot_key(t, t)) for t in range(self.num_tasks)]

  @property
  def slot_capacity(self) -> int:
    return self.num_tasks

  given_boundaries: ClassVar[bool] = True

  def new_segment(self, detection, t: int, e: int, *, step: int, embed) -> bool:
    """Whether a boundary comes before epoch e of task t: told by the stream, at every task's start."""
    del detection, step, embed
    return t > 0 and e == 0

  def detection_record(self, rs) -> Optional[dict]:
    """What results.json reports about boundary detection (nothing when the boundaries are given)."""
    return None

  def memory_domains(self, memory: memory_lib.Memory) -> np.ndarray:
    """Each memory sample's domain."""
    raise NotImplementedError

  def probe_groups(self, domains: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The groups the probe's training rows are balanced over."""
    raise NotImplementedError

  def probe_tests(self, t: int):
    """The probe's test rows after task t: (indices, task of each row, domain of each row, padded row count)."""
    raise NotImplementedError

  def check_memory(self, capacity: int) -> None:
    """Refuses a memory size this stream cannot hold (ConfigError)."""


class ClassIncremental(TaskStream):
  """Class-incremental tasks: Class-IL and Task-IL."""
  scenario = "class"
  default_detector = "novelty"
  metrics = ("class_il", "task_il")
  rotates = False
  probe_crops_current = True

  def task_classes(self, t):
    return np.arange(t * self.classes_per_task, (t + 1) * self.classes_per_task)

  def train_indices(self, t):
    return np.flatnonzero(np.isin(self.train_labels, self.task_classes(t)))

  def test_indices(self, t):
    return np.flatnonzero(np.isin(self.test_labels, self.task_classes(t)))

  def task_domain(self, t):
    return 0

  @property
  def contrastive_offset(self):
    return 0

  @property
  def num_contrastive_classes(self):
    return self.num_classes

  def update_memory(self, memory, *, task, capacity, seed, previous=None, seen=0):
    del seen
    classes = self.task_classes(task - 1) if previous is None else np.unique(self.train_labels[previous.index])
    return memory_lib.class_balanced_update(memory, self.train_labels, classes, capacity, task,
                                            memory_lib.memory_rng(seed, task))

  def slot_key(self, t, segment):
    return (0, 0)  # one domain; no contrastive tags

  def memory_domains(self, memory):
    return np.zeros(len(memory), np.int64)

  def probe_groups(self, domains, labels):
    return labels

  def probe_tests(self, t):
    idx = np.concatenate([self.test_indices(j) for j in range(t + 1)])
    return idx, self.test_labels[idx] // self.classes_per_task, np.zeros(len(idx), np.int64), len(self.test_labels)

  def check_memory(self, capacity):
    memory_lib.check_capacity(capacity, (self.num_tasks - 1) * self.classes_per_task)


class DomainIncremental(TaskStream):
  """Rotated digits: every task holds every class at its own angle; Domain-IL."""
  scenario = "domain"
  default_detector = "shift"
  metrics = ("domain_il",)
  rotates = True
  probe_crops_current = False  # the published R-MNIST probe rotates the current task's images without cropping

  def task_classes(self, t):
    return np.arange(self.num_classes)

  def train_indices(self, t):
    return np.arange(len(self.train_labels))

  def test_indices(self, t):
    return np.arange(len(self.test_labels))

  def task_domain(self, t):
    return t

  @property
  def contrastive_offset(self):
    return self.num_classes

  @property
  def num_contrastive_classes(self):
    return self.num_classes * self.num_tasks

  def update_memory(self, memory, *, task, capacity, seed, previous=None, seen=0):
    rng = memory_lib.memory_rng(seed, task)
    if previous is None:
      return memory_lib.reservoir_update(memory, len(self.train_labels), capacity, task, rng)
    return memory_lib.reservoir_add(memory, previous.index, previous.domain, capacity=capacity, seen=seen, rng=rng)

  def slot_key(self, t, segment):
    return (t, segment)  # the rotation is the image's; the tag the segment the learner saw it in

  def memory_domains(self, memory):
    return memory.tasks

  def probe_groups(self, domains, labels):
    return domains

  def probe_tests(self, t):
    n = len(self.test_labels)
    task = np.repeat(np.arange(t + 1), n)
    return np.tile(np.arange(n), t + 1), task, task, n * self.num_tasks

  def check_memory(self, capacity):
    if capacity > len(self.train_labels):
      raise ConfigError(f"memory.size {capacity} is larger than a domain's {len(self.train_labels)} training "
                        f"images: the reservoir could never fill it")


class TaskFree:
  """A stream that does not say where its tasks begin: the learner detects it (``config.boundaries='detected'``).

  It serves the same passes as the stream it wraps (``inner``, whose other rules it keeps), but a boundary comes
  where the detector fires on a pass's window of new samples (detectors.py), not where a task starts; every pass can
  open a new segment, so the slot table (domain, contrastive tag) grows up to one entry per pass.
  """
  given_boundaries = False

  def __init__(self, inner: TaskStream, *, detector: str, threshold: float, passes: int, window: int, seed: int):
    self.inner, self.threshold, self.passes, self.window_size, self.seed = inner, threshold, passes, window, seed
    self.detector = inner.default_detector if detector == "auto" else detector

  def __getattr__(self, name):
    return getattr(self.inner, name)

  def initial_slots(self) -> list:
    return []

  @property
  def slot_capacity(self) -> int:
    return self.passes

  @property
  def num_contrastive_classes(self) -> int:
    return self.num_classes * self.passes if self.contrastive_offset else self.inner.num_contrastive_classes

  def window(self, t: int, e: int) -> tuple[np.ndarray, np.ndarray]:
    """What the detector sees of epoch e of task t: ``window`` of the pass's new samples in a shuffle of its
    own (training-set indices, their domains); the replay memory, which is the past, is left out."""
    idx = np.random.default_rng([self.seed, t, e, 0x6E6577]).permutation(self.train_indices(t))[:self.window_size]
    return idx, np.full(len(idx), self.task_domain(t))

  def new_segment(self, detection, t: int, e: int, *, step: int, embed) -> bool:
    """The detector's verdict on the window of epoch e of task t (the task is the stream's, not the learner's:
    only the samples' images and labels reach the detector). ``detection`` (run_state.Detection) keeps what it
    observed; ``embed(index, domain)``: the learner's embeddings of training images at their domains."""
    index, domain = self.window(t, e)
    labels = self.train_labels[index]
    obs = {"step": step}
    if detection.previous is None:
      fired = False
    elif self.detector == "novelty":
      fired = obs["novel"] = detectors.label_novelty(labels=labels, seen=detection.seen)
    else:
      prev = detection.previous
      obs["shift"] = detectors.mean_shift(embed(prev["index"], prev["domain"]), embed(index, domain))
      fired = detectors.embedding_shift(value=obs["shift"], threshold=self.threshold)
    detection.seen = sorted(set(detection.seen) | set(labels.tolist()))
    detection.previous = {"index": index.tolist(), "domain": domain.tolist()}
    detection.observations.append(obs)
    if fired:
      detection.detected.append(step)
      stat = f"shift {obs['shift']:.1f} > {self.threshold:g}" if "shift" in obs else "new labels"
      tqdm.tqdm.write(f"boundary detected at step {step} ({stat}); the stream's task {t} "
                      f"starts {'here' if e == 0 else f'{e} epoch(s) earlier'}", file=sys.stderr)
    return fired

  def detection_record(self, rs) -> dict:
    """True boundaries (first step of every task after the first, window one epoch), detections, scores."""
    firsts = [p for p in rs.pass_log if p["task"] > 0 and p["epoch"] == 0]
    return {"detector": self.detector, "threshold": self.threshold if self.detector == "shift" else None,
            **detectors.scores([p["step"] for p in firsts], [p["steps"] for p in firsts], rs.detection.detected),
            "observations": rs.detection.observations}


def class_incremental(data: ArrayDataset, num_tasks: int, class_order=None) -> ClassIncremental:
  """Splits ``data`` into ``num_tasks`` tasks of equally many classes."""
  order = np.arange(data.num_classes) if class_order is None or len(class_order) == 0 else np.asarray(class_order)
  if sorted(order.tolist()) != list(range(data.num_classes)):
    raise ConfigError(f"data.class_order must be a permutation of 0..{data.num_classes - 1}, got {order.tolist()}")
  if num_tasks < 1 or data.num_classes % num_tasks:
    raise ConfigError(f"{data.num_classes} classes cannot be split into {num_tasks} equal tasks")
  rank = np.argsort(order)  # original label -> position in the order
  return ClassIncremental(num_tasks, data.num_classes, data.num_classes // num_tasks,
                          rank[data.train_labels].astype(np.int32), rank[data.test_labels].astype(np.int32),
                          np.zeros(num_tasks), np.zeros(num_tasks), order)


def rotation_angles(num_tasks: int, seed: int) -> np.ndarray:
  """One angle ~ U[0, 180) degrees per task, from a seeded generator."""
  return np.random.default_rng([seed, 0xA4]).uniform(0.0, 180.0, num_tasks)


def domain_incremental(data: ArrayDataset, num_tasks: int, seed: int,
                       test_uses_last_angle: bool = False, angles=()) -> DomainIncremental:
  """Rotated digits: every task holds all classes at its own angle.

  Args:
    test_uses_last_angle: reproduce the published bug where every task's test
      copy is rotated by the last task's angle.
    angles: explicit angles in degrees, one per task (e.g. a published run's,
      to reproduce its stream exactly); empty = drawn from ``seed``.
  """
  if num_tasks < 1:
    raise ConfigError(f"data.num_tasks must be >= 1, got {num_tasks}")
  if len(angles) not in (0, num_tasks):
    raise ConfigError(f"data.rotation_angles has {len(angles)} angles for {num_tasks} tasks")
  angles = np.asarray(angles, np.float64) if len(angles) else rotation_angles(num_tasks, seed)
  test_angles = np.full(num_tasks, angles[-1]) if test_uses_last_angle else angles.copy()
  return DomainIncremental(num_tasks, data.num_classes, data.num_classes, data.train_labels, data.test_labels,
                           angles, test_angles, np.arange(data.num_classes))


def make_stream(data: ArrayDataset, config):
  """The stream ``config.data.scenario`` names, checked against ``config.memory.size`` and the batch size;
  a :class:`TaskFree` around it when ``config.boundaries='detected'``."""
  d = config.data
  if d.scenario == "domain":
    stream = domain_incremental(data, d.num_tasks, config.seed, d.rmnist_test_uses_last_angle,
                                tuple(d.rotation_angles))
  else:
    stream = class_incremental(data, d.num_tasks, tuple(d.class_order))
  stream.check_memory(config.memory.size)
  if config.boundaries == "detected":
    passes = config.train.epochs_first + (stream.num_tasks - 1) * config.train.epochs
    stream = TaskFree(stream, detector=config.detection.detector, threshold=config.detection.shift_threshold,
                      passes=passes, window=config.detection.window, seed=config.seed)
  smallest = min(len(stream.train_indices(t)) for t in range(stream.num_tasks))
  if config.train.batch_size > smallest:
    raise ConfigError(f"train.batch_size {config.train.batch_size} is larger than the smallest task's {smallest} "
                      f"training samples: its epochs would be one padded step each")
  return stream


def load(config) -> tuple[ArrayDataset, TaskStream]:
  """Loads the dataset the config names (optionally a class-stratified training subset) and its task stream."""
  kwargs = dict(data_dir=config.data.data_dir or None, source=config.data.source,
                download=config.data.download, split_seed=config.data.split_seed)
  if config.dataset == "synthetic":
    kwargs.update(config.data.synthetic.to_dict())
  data = sources.carve(sources.load_dataset(config.dataset, **kwargs),
                       train_per_class=config.data.get("train_per_class", 0),
                       validation_per_class=config.data.get("validation_per_class", 0), seed=config.data.split_seed)
  return data, make_stream(data, config)


def validation_stream(data: ArrayDataset, config):
  """The stream whose test rows are the validation images (the same tasks, angles and labels; None without a
  validation set): a read-out scored on it chooses settings without the test images."""
  if data.validation_images is None:
    return None
  held = dataclasses.replace(data, test_images=data.validation_images, test_labels=data.validation_labels)
  return make_stream(held, config)
