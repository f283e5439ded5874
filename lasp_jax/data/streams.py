"""Continual task streams: class-incremental splits and Rotated MNIST domains.

A stream relabels classes so that task t owns the contiguous labels
``[t * cpt, (t + 1) * cpt)`` of ``class_order``; Task-IL evaluation then restricts
the prediction to that block. A domain stream keeps the 10 digits in every task
and gives each task a rotation angle.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lasp_jax.data.sources import ArrayDataset
from lasp_jax.errors import ConfigError


@dataclasses.dataclass
class TaskStream:
  """Everything about the task sequence that training and evaluation need."""
  scenario: str                   # "class" or "domain"
  num_tasks: int
  num_classes: int                # classes the classifier predicts
  classes_per_task: int
  train_labels: np.ndarray        # (N,) labels after relabelling
  test_labels: np.ndarray
  angles: np.ndarray              # (num_tasks,) degrees; zeros for class-IL
  test_angles: np.ndarray         # (num_tasks,) angle applied to task j's test copy
  class_order: np.ndarray

  def task_classes(self, t: int) -> np.ndarray:
    if self.scenario == "domain":
      return np.arange(self.num_classes)
    return np.arange(t * self.classes_per_task, (t + 1) * self.classes_per_task)

  def train_indices(self, t: int) -> np.ndarray:
    """Training-set indices of task t's own data (all images for a domain task)."""
    if self.scenario == "domain":
      return np.arange(len(self.train_labels))
    return np.flatnonzero(np.isin(self.train_labels, self.task_classes(t)))

  def test_indices(self, t: int) -> np.ndarray:
    if self.scenario == "domain":
      return np.arange(len(self.test_labels))
    return np.flatnonzero(np.isin(self.test_labels, self.task_classes(t)))

  def contrastive_labels(self, labels: np.ndarray, domains: np.ndarray) -> np.ndarray:
    """SupCon classes: the class, or digit + 10 * domain for Rotated MNIST."""
    if self.scenario == "domain":
      return labels + self.num_classes * domains
    return labels

  @property
  def num_contrastive_classes(self) -> int:
    return self.num_classes * (self.num_tasks if self.scenario == "domain" else 1)


def class_incremental(data: ArrayDataset, num_tasks: int, class_order=None) -> TaskStream:
  """Splits ``data`` into ``num_tasks`` tasks of equally many classes."""
  order = np.arange(data.num_classes) if class_order is None or len(class_order) == 0 else np.asarray(class_order)
  if sorted(order.tolist()) != list(range(data.num_classes)):
    raise ConfigError(f"data.class_order must be a permutation of 0..{data.num_classes - 1}, got {order.tolist()}")
  if num_tasks < 1 or data.num_classes % num_tasks:
    raise ConfigError(f"{data.num_classes} classes cannot be split into {num_tasks} equal tasks")
  rank = np.argsort(order)  # original label -> position in the order
  return TaskStream("class", num_tasks, data.num_classes, data.num_classes // num_tasks,
                    rank[data.train_labels].astype(np.int32), rank[data.test_labels].astype(np.int32),
                    np.zeros(num_tasks), np.zeros(num_tasks), order)


def rotation_angles(num_tasks: int, seed: int) -> np.ndarray:
  """One angle ~ U[0, 180) degrees per task, from a seeded generator."""
  return np.random.default_rng([seed, 0xA4]).uniform(0.0, 180.0, num_tasks)


def domain_incremental(data: ArrayDataset, num_tasks: int, seed: int,
                       test_uses_last_angle: bool = False, angles=()) -> TaskStream:
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
  return TaskStream("domain", num_tasks, data.num_classes, data.num_classes, data.train_labels,
                    data.test_labels, angles, test_angles, np.arange(data.num_classes))
