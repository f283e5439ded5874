"""The work when the learner opens a new segment (a task boundary, given or detected).

The memory is updated from the segment that ends; then the method does its part (methods.Method.at_boundary:
the past model it distils against; SD and GM also the look-ahead on the data the new segment starts with, SD
keeping the searched subset of embedding dims, GM the EB salience, carried in the optimizer state). A look-ahead
is recorded in the run state's boundaries.
"""

from __future__ import annotations

from lasp_jax.loop import checkpoint, context
from lasp_jax.loop.context import Carry, Context
from lasp_jax.loop.run_state import MemoryRecord, Segment
from lasp_jax.method import lookahead, pools


def segment_samples(stream, passes) -> pools.Batch:
  """The stream samples a segment trained on (every task and slot of its passes)."""
  parts = [pools.task_pool(stream, t, slot) for t, slot in passes]
  return pools.concat_pools(*parts) if parts else pools.empty_pool()


def open_segment(ctx: Context, carry: Carry, t: int) -> None:
  """A new segment before the next epoch of task t: the memory from the segment that ends, the past model
  (methods that distil), the look-ahead on the model as it ended that segment (methods that look ahead)."""
  checkpoint.fault_point(f"boundary:{t}")
  rs, stream, config = carry.rs, ctx.stream, ctx.config
  previous, seen = segment_samples(stream, rs.segment.passes), rs.segment.seen
  k = rs.segment.index + 1
  rs.segment = Segment(index=k, seen=seen + len(previous.index))
  mem = stream.update_memory(rs.memory.get(), task=k, capacity=config.memory.size, seed=config.seed,
                             previous=previous, seen=seen)
  rs.memory = MemoryRecord.of(mem)

  def look() -> lookahead.BoundaryResult:  # on the model as it ended the segment before, the new segment's pool
    pool = pools.training_pool(stream, mem, t, context.slot(ctx, carry, t))
    return lookahead.at_boundary(k, mem, pool, config=config, stream=stream, parts=ctx.parts,
                                 variables=carry.state.variables(), data=carry.data)

  carry.state, carry.past, res = ctx.method.at_boundary(rs, carry.state, carry.past, look, task=t)
  if res is None:
    return
  info = dict(task=t, **res.info)
  if not stream.given_boundaries:
    info.update(segment=k, step=rs.steps_done)
  rs.boundaries.append(info)
