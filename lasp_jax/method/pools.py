"""The samples a task trains on, as :class:`data.arrays.Batch` arrays (index, domain, is_current, valid).

A pool is what an epoch shuffles into batches (``steps.epoch_batches``), what the
look-ahead search draws its rows from (``lookahead.lookahead_rows``) and what the
probe trains on (``evaluators.probe_data``).
"""

from __future__ import annotations

import numpy as np

from lasp_jax.data.arrays import Batch


def task_pool(stream, t: int, slot=None) -> Batch:
  """Task t's own training samples, all current, in the run's ``slot`` (default: the task's domain)."""
  own = stream.train_indices(t).astype(np.int32)
  n = len(own)
  slot = stream.task_domain(t) if slot is None else slot
  return Batch(own, np.full(n, slot, np.int32), np.ones(n, bool), np.ones(n, bool))


def empty_pool() -> Batch:
  return Batch(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, bool), np.zeros(0, bool))


def concat_pools(*pools: Batch) -> Batch:
  return Batch(*[np.concatenate(parts) for parts in zip(*pools)])


def memory_pool(stream, memory) -> Batch:
  """The memory's samples (past), each at its own domain."""
  n = len(memory)
  return Batch(memory.indices.astype(np.int32), stream.memory_domains(memory).astype(np.int32), np.zeros(n, bool),
               np.ones(n, bool))


def training_pool(stream, memory, t: int, slot=None) -> Batch:
  """Task t's own samples (current) followed by the memory (past)."""
  return concat_pools(task_pool(stream, t, slot), memory_pool(stream, memory))
