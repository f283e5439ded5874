"""The work when the learner opens a new segment (a task boundary, given or detected).

The memory is updated from the segment that ends, the past model is snapshot (methods that distil), and the
look-ahead runs on the data the new segment starts with (methods that look ahead: SD keeps the searched subset
of embedding dims, GM the EB salience, carried in the optimizer state).
"""

from __future__ import annotations

from lasp_jax import checkpoint, pools
from lasp_jax.run_state import MemoryRecord, RunState, Segment
from lasp_jax.steps import past_model


def segment_samples(stream, passes) -> pools.Batch:
  """The stream samples a segment trained on (every task and slot of its passes)."""
  parts = [pools.task_pool(stream, t, slot) for t, slot in passes]
  return pools.concat_pools(*parts) if parts else pools.empty_pool()


def open_segment(rs: RunState, t: int, *, config, stream, method, state, past, slot, lookahead):
  """A new segment before the next epoch of task t; returns the (train state, past model) to train it with.

  ``slot(t)``: task t's slot in the new segment (the run's: it may add one); ``lookahead(segment, memory,
  pool)``: lookahead.at_boundary on the model as it ended the segment before.
  """
  checkpoint.fault_point(f"boundary:{t}")
  previous, seen = segment_samples(stream, rs.segment.passes), rs.segment.seen
  k = rs.segment.index + 1
  rs.segment = Segment(index=k, seen=seen + len(previous.index))
  mem = stream.update_memory(rs.memory.get(), task=k, capacity=config.memory.size, seed=config.seed,
                             previous=previous, seen=seen)
  rs.memory = MemoryRecord.of(mem)
  if not method.distills:
    return state, past
  past = past_model(state)
  if not method.looks_ahead:
    return state, past
  res = lookahead(k, mem, pools.training_pool(stream, mem, t, slot(t)))
  state = method.take_lookahead(rs, state, res, task=t)
  info = dict(task=t, **res.info)
  if not stream.given_boundaries:
    info.update(segment=k, step=rs.steps_done)
  rs.boundaries.append(info)
  return state, past
