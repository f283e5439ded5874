"""Replay memory: class-balanced (class-incremental) and reservoir (domain).

The memory stores training-set indices (and, for domains, the task each entry
came from, which fixes its rotation); images are re-augmented on every use.
Both updates run on the host with a ``numpy.random.Generator`` derived from
(seed, task), so they are reproducible and need no saved RNG state.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lasp_jax.errors import ConfigError


@dataclasses.dataclass
class Memory:
  """Replay memory contents: parallel arrays of train indices and source tasks."""
  indices: np.ndarray  # (n,) int
  tasks: np.ndarray    # (n,) int

  @classmethod
  def empty(cls) -> "Memory":
    return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))

  def __len__(self) -> int:
    return len(self.indices)


def memory_rng(seed: int, task: int) -> np.random.Generator:
  return np.random.default_rng([seed, task, 0x6D656D])


def _random_round(x: float, rng: np.random.Generator) -> int:
  """Rounds up with probability equal to the fractional part."""
  base = int(np.floor(x))
  return base + int(rng.random() < x - base)


def class_balanced_update(memory: Memory, train_labels: np.ndarray, new_classes, capacity: int, task: int,
                          rng: np.random.Generator) -> Memory:
  """Rebuilds the memory at the start of task ``task`` >= 1 (protocol section 1.4).

  1. Shrink the stored classes to a total of (task - 1) * capacity / task, each
     keeping a random subset of the share, randomly rounded.
  2. Fill up to ``capacity`` with samples of ``new_classes`` (task - 1's), class by
     class, each getting (capacity - size) / (classes left), randomly rounded.
  """
  keep_idx, keep_task = [memory.indices[:0]], [memory.tasks[:0]]
  if len(memory):
    labels = train_labels[memory.indices]
    stored = np.unique(labels)
    share = (task - 1) * capacity / task / len(stored)
    for c in stored:
      pos = np.flatnonzero(labels == c)
      k = min(len(pos), _random_round(share, rng))
      pick = rng.choice(pos, k, replace=False)
      keep_idx.append(memory.indices[pick])
      keep_task.append(memory.tasks[pick])
  size = sum(len(a) for a in keep_idx)
  new_classes = list(new_classes)
  for i, c in enumerate(new_classes):
    pool = np.flatnonzero(train_labels == c)
    k = min(len(pool), max(0, _random_round((capacity - size) / (len(new_classes) - i), rng)))
    keep_idx.append(rng.choice(pool, k, replace=False))
    keep_task.append(np.full(k, task - 1))
    size += k
  return Memory(np.concatenate(keep_idx).astype(np.int64), np.concatenate(keep_task).astype(np.int64))


def reservoir_update(memory: Memory, num_train: int, capacity: int, task: int,
                     rng: np.random.Generator) -> Memory:
  """Adds task ``task - 1``'s ``num_train`` images by reservoir sampling.

  At task 1 the memory is ``capacity`` random indices of task 0. Later the
  "seen so far" counter starts at (task - 1) * num_train, as published.
  """
  return reservoir_add(memory, np.arange(num_train), np.full(num_train, task - 1), capacity=capacity,
                       seen=(task - 1) * num_train, rng=rng)


def reservoir_add(memory: Memory, indices: np.ndarray, tags: np.ndarray, *, capacity: int, seen: int,
                  rng: np.random.Generator) -> Memory:
  """Adds the samples ``indices`` (each stored with its tag) by reservoir sampling, ``seen`` samples before them.

  An empty memory takes ``capacity`` random samples of them; otherwise sample i draws a slot in
  [0, seen + i - 1] (the published reservoir, main_domain.py) and replaces the entry there if the slot is free.
  """
  indices, tags = np.asarray(indices, np.int64), np.asarray(tags, np.int64)
  if not len(memory):
    pick = np.sort(rng.choice(len(indices), min(capacity, len(indices)), replace=False))
    return Memory(indices[pick], tags[pick])
  out_idx, out_tags = memory.indices.copy(), memory.tasks.copy()
  slots = rng.integers(0, seen + np.arange(len(indices)))
  for i in np.flatnonzero(slots < capacity):  # in order: later samples overwrite
    out_idx[slots[i]], out_tags[slots[i]] = indices[i], tags[i]
  return Memory(out_idx, out_tags)


def check_capacity(capacity: int, classes_before_last_task: int) -> None:
  """Refuses a memory that cannot hold one sample of every class it must keep (0: no memory at all)."""
  if capacity < 0 or 0 < capacity < classes_before_last_task:
    raise ConfigError(f"memory size {capacity} is impossible: it must be >= {classes_before_last_task} "
                      "to hold one sample of every class seen before the last task")
