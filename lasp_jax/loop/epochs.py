"""The epochs of a task: one function for one run and for several seeds in lockstep.

:func:`train_task` runs task t's epochs of some runs (each a context.Context and its context.Carry) through an
``executor`` that trains a chunk of steps of every run at once (:class:`OneRun` here, the vmapped seeds' in
seeds.py). Before every epoch a run may open a new segment (given boundaries: at a task's start; detected: where
its stream's detector fires; boundary.py), so the plan (pool, learning rates, mask) is each epoch's.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from lasp_jax.errors import NonFiniteLoss
from lasp_jax.eval import health
from lasp_jax.loop import boundary, checkpoint, context, steps
from lasp_jax.loop.context import Carry, Context
from lasp_jax.loop.steps import Batch, epoch_batches, num_steps
from lasp_jax.loop.train_state import task_lrs
from lasp_jax.platform import clock


@dataclasses.dataclass(frozen=True)
class EpochPlan:
  """What one epoch of a task trains: its pool, the samples an epoch draws from it, its steps, the lr of each
  step, SD's dim mask, and the shuffle's seed (seed, segment, epoch)."""
  pool: Batch
  per_epoch: int
  steps: int
  lrs: np.ndarray
  mask: jax.Array
  shuffle: tuple


def train_task(ctxs, carries, t: int, executor) -> None:
  """Task t's epochs of the runs (``ctxs[i]``, ``carries[i]``) in lockstep: one chunk loop, mid-epoch
  checkpoints and epoch ends for all."""
  runs = list(zip(ctxs, carries))
  prog0, c0 = carries[0].rs.progress, ctxs[0]
  bars = [progress_bar(x, c, t) for x, c in runs]
  every = c0.config.train.checkpoint_every_steps
  for e in range(prog0.epoch, c0.task_epochs(t)):
    for x, c in runs:
      before_epoch(x, c, t)
    t_plan = time.perf_counter()
    plans = [epoch_plan(x, c, t) for x, c in runs]
    executor.begin_epoch(ctxs, carries, plans)
    per_run = [epoch_chunks(x.config, p) for x, p in zip(ctxs, plans)]
    for c in carries:  # host work before the epoch's first step: pools, shuffles, schedules
      clock.add(c.rs.timing, "epoch_setup_s", time.perf_counter() - t_plan)
    lr_e = per_run[0][1]  # one schedule for every run
    starts = [(time.perf_counter(), [steps.step_metrics(c.rs.progress.partial, x.metric_names)])
              for x, c in runs]
    for k in range(prog0.call, len(lr_e)):
      chunk_k = [chunks[k] for chunks, _ in per_run]
      announce_compile(ctxs[0], carries[0], t, chunk_k[0])
      ms = executor.execute(ctxs, carries, chunk_k, steps.pad_lrs(lr_e[k], chunk_k[0].valid.shape[0]))
      for (_, outs), m in zip(starts, ms):
        outs.append(m)
      if every and k + 1 < len(lr_e) and steps.checkpoint_due(lr_e, k, every):
        executor.sync(ctxs, carries)
        for (x, c), (_, outs) in zip(runs, starts):
          save_mid_epoch(x, c, t, e, k, outs)
        checkpoint.fault_point(f"step:{t}:{e}:{k + 1}")
    executor.sync(ctxs, carries)
    for (x, c), p, (chunks, _), (t0, outs), bar in zip(runs, plans, per_run, starts, bars):
      end_epoch(x, c, t, e, p, chunks, outs, t0, bar)
  for (x, c), bar in zip(runs, bars):
    end_task(x, c, t, bar)


class OneRun:
  """The executor of one run: its own state through its own chunk program."""

  def begin_epoch(self, ctxs, carries, plans) -> None:
    self.mask = plans[0].mask

  def execute(self, ctxs, carries, chunks, lrs) -> list:
    (x,), (c,) = ctxs, carries
    c.state, m = x.chunk_fn(c.state, c.past, self.mask, c.data, jax.device_put(chunks[0], x.batch_sharding), lrs)
    return [m]

  def sync(self, ctxs, carries) -> None:
    """Nothing to do: the state is the run's own."""


def check_finite(outs, t: int, e: int, where, names: tuple):
  """All step metrics of the epoch so far (columns ``names``); NonFiniteLoss (a TrainingError) at the first
  non-finite loss (``where()``: the last good checkpoint, asked for only then)."""
  m = np.concatenate([steps.step_metrics(o, names) for o in outs])
  bad = np.flatnonzero(~np.isfinite(m[:, names.index("loss")]))
  if bad.size:
    i = int(bad[0])
    before = steps.describe_step(m, i - 1, names) if i else "none this epoch"
    raise NonFiniteLoss(f"non-finite loss at task {t}, epoch {e + 1}, step {i + 1} of the epoch "
                        f"({steps.describe_step(m, i, names)}; the step before: {before})", where())
  return m


def run_name(ctx: Context) -> str:
  """The run as its progress lines name it: method and seed."""
  return f"{ctx.config.method} seed {ctx.config.seed}"


def progress_bar(ctx: Context, carry: Carry, t: int):
  return tqdm.tqdm(total=ctx.task_epochs(t), initial=carry.rs.progress.epoch, desc=f"{run_name(ctx)} task {t}",
                   disable=not ctx.config.progress, leave=True)


_PROGRAMS_SEEN: set = set()


def announce_compile(ctx: Context, carry: Carry, t: int, chunk) -> None:
  """One line before a chunk whose program this process has not run yet (a new method, the first past model, a
  new batch shape): its first call compiles it (or loads it from the persistent cache), seconds of silence."""
  key = (ctx.loss_cfg, carry.past is None, tuple(chunk.valid.shape))
  if key in _PROGRAMS_SEEN:
    return
  _PROGRAMS_SEEN.add(key)
  if ctx.config.progress:
    tqdm.tqdm.write(f"{run_name(ctx)} task {t}: compiling the train step (once per program)", file=sys.stderr)


def before_epoch(ctx: Context, carry: Carry, t: int) -> None:
  """A boundary before the next epoch of task t if the stream says (or its detector finds) one is due; task
  t's data joins the segment's (what the next boundary's memory update draws from)."""
  prog, rs = carry.rs.progress, carry.rs
  if not prog.boundary_done:
    embed = lambda index, domain: context.embed(ctx, carry, index, domain)
    if ctx.stream.new_segment(rs.detection, t, prog.epoch, step=rs.steps_done, embed=embed):
      context.timed(carry, "boundary_s", boundary.open_segment, ctx, carry, t)
    join_segment(ctx, carry, t)
    prog.boundary_done = True


def join_segment(ctx: Context, carry: Carry, t: int) -> None:
  """Task t's data (at its slot) joins the current segment's passes, once."""
  key = [t, context.slot(ctx, carry, t)]
  if key not in carry.rs.segment.passes:
    carry.rs.segment.passes.append(key)


def epoch_plan(ctx: Context, carry: Carry, t: int) -> EpochPlan:
  """What the next epoch of task t needs: pool, epoch size, the lr of each of its steps, mask, shuffle seed.

  The schedule and the shuffle follow the run's segment: its first ``train.epochs_first`` (segment 0) or
  ``train.epochs`` epochs anneal as a task's would, later ones stay at the schedule's last value.
  """
  c, seg = ctx.config, carry.rs.segment
  pool, per_epoch = ctx.method.pool(ctx.stream, carry.memory, t, context.slot(ctx, carry, t), state=carry.state)
  spe = num_steps(per_epoch, c.train.batch_size)
  lrs = task_lrs(c.train, epochs=ctx.task_epochs(0) if seg.index == 0 else c.train.epochs, steps_per_epoch=spe)
  start = seg.epoch * spe
  lrs = lrs[start:start + spe] if start < len(lrs) else np.full(spe, lrs[-1])
  return EpochPlan(pool=pool, per_epoch=per_epoch, steps=spe, lrs=lrs, mask=jnp.asarray(carry.rs.mask, bool),
                   shuffle=(c.seed, seg.index, seg.epoch))


def epoch_chunks(config, plan: EpochPlan) -> tuple[list, list]:
  """The epoch's chunks of batches ((steps_per_call, B) per field) and the lr of each real step.

  The last chunk's tail is padded with empty steps, which the compiled loop skips (steps.chunk_body): one
  program for every chunk. ``train.tail_multiple`` > 0: the epoch's short last step is a chunk of its own at
  its size (steps.split_tail). The lrs stay the real steps' only (checkpoint_due counts them).
  """
  tc, spe = config.train, plan.steps
  spc = tc.steps_per_call
  batches = epoch_batches(plan.pool, tc.batch_size, spc, np.random.default_rng(plan.shuffle), take=plan.per_epoch)
  lrs = plan.lrs.astype(np.float32)
  chunks = [Batch(*[f[k] for f in batches]) for k in range(len(batches.index))]
  lr_chunks = [lrs[a:a + spc] for a in range(0, spe, spc)]
  if tc.tail_multiple:
    return steps.split_tail(chunks, lr_chunks, tc.tail_multiple)
  return chunks, lr_chunks


def finite(ctx: Context, outs, t: int, e: int):
  return check_finite(outs, t, e, lambda: f"{ctx.ckpt.latest()} in {ctx.ckpt.path}", ctx.metric_names)


def save_mid_epoch(ctx: Context, carry: Carry, t: int, e: int, k: int, outs) -> None:
  """A checkpoint after chunk k of epoch e, with the epoch's metrics so far."""
  carry.rs.progress.partial = finite(ctx, outs, t, e).tolist()
  carry.rs.progress.call = k + 1
  context.save(ctx, carry)


def end_epoch(ctx: Context, carry: Carry, t: int, e: int, plan: EpochPlan, chunks, outs, t0: float, bar) -> None:
  """The epoch's step metrics (checked finite; waits for the device, so the rate is real) averaged into one
  curve row with the degenerate reference values of its batches ``chunks``; progress, bar and TensorBoard."""
  m = finite(ctx, outs, t, e)  # waits for the epoch's last step
  t_end = time.perf_counter()
  names = ctx.metric_names
  n = m[:, names.index("num_valid")]
  rate = n[len(outs[0]):].sum() / max(t_end - t0, 1e-9)
  m, n = m[n > 0], n[n > 0]
  means = {k: float((n / max(n.sum(), 1)) @ m[:, i]) for i, k in enumerate(names) if k != "num_valid"}
  lr, rs = float(plan.lrs[-1]), carry.rs
  refs = ctx.method.reference_values(chunks, ctx.config)
  rs.curves.append({"task": t, "epoch": e + 1, **means, "lr": lr, **refs})
  rs.pass_log.append({"task": t, "epoch": e, "step": rs.steps_done, "steps": plan.steps, "rows": plan.per_epoch})
  rs.steps_done += plan.steps
  rs.segment.epoch += 1
  p = rs.progress
  p.epoch, p.call, p.partial, p.boundary_done = e + 1, 0, [], False
  p.lr_max = max(p.lr_max, float(np.max(plan.lrs)))
  bar.update(1)
  bar.set_postfix(**{k: f"{means[k]:.3f}" for k in ctx.method.progress_keys}, lr=f"{lr:.4f}", img_s=f"{rate:.0f}")
  if carry.writer:
    for k, v in {**means, "lr": lr}.items():
      carry.writer.add_scalar(f"{k}_{t}", v, int(carry.state.step))
  clock.add(rs.timing, "epoch_end_s", time.perf_counter() - t_end)  # host work after its last step


def end_task(ctx: Context, carry: Carry, t: int, bar) -> None:
  """Closes the task's progress bar and runs the health checks on it (one line per flag, kept for results)."""
  bar.close()
  tc, rs = ctx.config.train, carry.rs
  flags = health.task_flags(t, rs.curves, lrs=[rs.progress.lr_max or tc.lr], floor=tc.lr * tc.lr_min_ratio,
                            boundaries=[b for b in rs.boundaries if b["task"] == t],
                            **{k: getattr(ctx.method, k) for k in health.METHOD_TRAITS})
  for f in flags:
    tqdm.tqdm.write(f.line(), file=sys.stderr)
  rs.health.extend(dataclasses.asdict(f) for f in flags)
