"""The epochs of a task: one function for one run and for several seeds in lockstep.

:func:`train_task` runs task t's epochs for its ``learners`` (each a :class:`Learner`: a run's per-epoch side:
plan, batches, bookkeeping) through an ``executor`` that trains a chunk of steps of every learner at once
(:class:`OneRun` here, the vmapped seeds' in seeds.py). Before every epoch a learner may open a new segment
(given boundaries: at a task's start; detected: where its stream's detector fires), so the plan (pool,
learning rates, mask) is each epoch's.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from lasp_jax import checkpoint, clock, health, steps
from lasp_jax.errors import NonFiniteLoss
from lasp_jax.steps import Batch, epoch_batches, num_steps
from lasp_jax.train_state import task_lrs


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


def train_task(learners, t: int, executor) -> None:
  """Task t's epochs for ``learners`` in lockstep: the same chunk loop, mid-epoch checkpoints and epoch ends."""
  prog0 = learners[0].rs.progress
  bars = [r.progress_bar(t) for r in learners]
  every = learners[0].config.train.checkpoint_every_steps
  for e in range(prog0.epoch, learners[0].task_epochs(t)):
    for r in learners:
      r.before_epoch(t)
    t_plan = time.perf_counter()
    plans = [r.epoch_plan(t) for r in learners]
    executor.begin_epoch(learners, plans)
    per_run = [r.epoch_chunks(p) for r, p in zip(learners, plans)]
    for r in learners:  # host work before the epoch's first step: pools, shuffles, schedules
      clock.add(r.rs.timing, "epoch_setup_s", time.perf_counter() - t_plan)
    lr_e = per_run[0][1]  # one schedule for every learner
    starts = [(time.perf_counter(), [steps.step_metrics(r.rs.progress.partial)]) for r in learners]
    for k in range(prog0.call, len(lr_e)):
      chunk_k = [chunks[k] for chunks, _ in per_run]
      ms = executor.execute(learners, chunk_k, steps.pad_lrs(lr_e[k], chunk_k[0].valid.shape[0]))
      for (_, outs), m in zip(starts, ms):
        outs.append(m)
      if every and k + 1 < len(lr_e) and steps.checkpoint_due(lr_e, k, every):
        executor.sync(learners)
        for r, (_, outs) in zip(learners, starts):
          r.save_mid_epoch(t, e, k, outs)
        checkpoint.fault_point(f"step:{t}:{e}:{k + 1}")
    executor.sync(learners)
    for r, p, (chunks, _), (t0, outs), bar in zip(learners, plans, per_run, starts, bars):
      r.end_epoch(t, e, p, chunks, outs, t0, bar)
  for r, bar in zip(learners, bars):
    r.end_task(t, bar)


class OneRun:
  """The executor of one learner: its own state through its own chunk program."""

  def begin_epoch(self, learners, plans) -> None:
    self.mask = plans[0].mask

  def execute(self, learners, chunks, lrs) -> list:
    (r,) = learners
    r.state, m = r.chunk_fn(r.state, r.past, self.mask, r.data, jax.device_put(chunks[0], r.batch_sharding), lrs)
    return [m]

  def sync(self, learners) -> None:
    """Nothing to do: the state is the learner's own."""


def check_finite(outs, t: int, e: int, where):
  """All step metrics of the epoch so far; NonFiniteLoss (a TrainingError) at the first non-finite loss
  (``where()``: the last good checkpoint, asked for only then)."""
  m = np.concatenate([steps.step_metrics(o) for o in outs])
  bad = np.flatnonzero(~np.isfinite(m[:, steps.COLUMN["loss"]]))
  if bad.size:
    i = int(bad[0])
    before = steps.describe_step(m, i - 1) if i else "none this epoch"
    raise NonFiniteLoss(f"non-finite loss at task {t}, epoch {e + 1}, step {i + 1} of the epoch "
                        f"({steps.describe_step(m, i)}; the step before: {before})", where())
  return m


class Learner:
  """The per-epoch side of a run, for :func:`train_task`: what an epoch trains on and what it records.

  A run is one: this reads its ``config``, ``parts``, ``stream``, ``method``, ``rs`` (run_state.RunState),
  ``state``, ``writer`` and ``ckpt``, and calls its ``open_segment(t)``, ``slot(t)``, ``embed`` and ``save()``.
  """

  @functools.cached_property
  def chunk_fn(self):
    """The compiled chunk of train steps (built on first use: seeds trained as one vmapped program never do)."""
    p = self.parts
    return steps.make_chunk_fn(p.model, p.tx, p.aug_cfg, p.loss_cfg, compiler_options=p.compiler_options)

  def timed(self, phase: str, fn, t: int):
    """Runs fn(t), adding its wall seconds (device work finished) to the phase's total; returns fn's result."""
    t0, c0 = time.perf_counter(), clock.compile_seconds()
    out = fn(t)
    jax.block_until_ready(self.state.params)
    clock.add(self.rs.timing, phase, time.perf_counter() - t0)
    clock.add(self.rs.timing, phase.removesuffix("_s") + "_compile_s", clock.compile_seconds() - c0)  # of it
    return out

  def task_epochs(self, t: int) -> int:
    """The passes the stream makes over task t's data."""
    return self.config.train.epochs_first if t == 0 else self.config.train.epochs

  def progress_bar(self, t: int):
    return tqdm.tqdm(total=self.task_epochs(t), initial=self.rs.progress.epoch, desc=f"task {t}",
                     disable=not self.config.progress, leave=True)

  def before_epoch(self, t: int) -> None:
    """A boundary before the next epoch of task t if the stream says (or its detector finds) one is due."""
    prog = self.rs.progress
    if not prog.boundary_done:
      if self.stream.new_segment(self.rs.detection, t, prog.epoch, step=self.rs.steps_done, embed=self.embed):
        self.timed("boundary_s", self.open_segment, t)
      self.note_pass(t)
      prog.boundary_done = True

  def note_pass(self, t: int) -> None:
    """Task t's data joins the current segment's (what its boundary's memory update draws from)."""
    key = [t, self.slot(t)]
    if key not in self.rs.segment.passes:
      self.rs.segment.passes.append(key)

  def epoch_plan(self, t: int) -> "EpochPlan":
    """What the next epoch of task t needs: pool, epoch size, the lr of each of its steps, mask, shuffle seed.

    The schedule and the shuffle follow the learner's segment: its first ``train.epochs_first`` (segment 0)
    or ``train.epochs`` epochs anneal as a task's would, later ones stay at the schedule's last value.
    """
    c, seg = self.config, self.rs.segment
    pool, per_epoch = self.method.pool(self.stream, self.rs.memory.get(), t, self.slot(t))
    spe = num_steps(per_epoch, c.train.batch_size)
    lrs = task_lrs(c.train, epochs=self.task_epochs(0) if seg.index == 0 else c.train.epochs, steps_per_epoch=spe)
    start = seg.epoch * spe
    lrs = lrs[start:start + spe] if start < len(lrs) else np.full(spe, lrs[-1])
    return EpochPlan(pool=pool, per_epoch=per_epoch, steps=spe, lrs=lrs, mask=jnp.asarray(self.rs.mask, bool),
                     shuffle=(c.seed, seg.index, seg.epoch))

  def epoch_chunks(self, plan: "EpochPlan") -> tuple[list, list]:
    """The epoch's chunks of batches ((steps_per_call, B) per field) and the lr of each real step.

    The last chunk's tail is padded with empty steps, which the compiled loop skips (steps.chunk_body): one
    program for every chunk. ``train.tail_multiple`` > 0: the epoch's short last step is a chunk of its own at
    its size (steps.split_tail). The lrs stay the real steps' only (checkpoint_due counts them).
    """
    c, spe, spc = self.config, plan.steps, self.config.train.steps_per_call
    batches = epoch_batches(plan.pool, c.train.batch_size, spc, np.random.default_rng(plan.shuffle),
                            take=plan.per_epoch)
    lrs = plan.lrs.astype(np.float32)
    chunks = [Batch(*[f[k] for f in batches]) for k in range(len(batches.index))]
    lr_chunks = [lrs[a:a + spc] for a in range(0, spe, spc)]
    if c.train.tail_multiple:
      return steps.split_tail(chunks, lr_chunks, c.train.tail_multiple)
    return chunks, lr_chunks

  def save_mid_epoch(self, t: int, e: int, k: int, outs) -> None:
    """A checkpoint after chunk k of epoch e, with the epoch's metrics so far."""
    self.rs.progress.partial = self.finite(outs, t, e).tolist()
    self.rs.progress.call = k + 1
    self.save()

  def finite(self, outs, t: int, e: int):
    return check_finite(outs, t, e, lambda: f"{self.ckpt.latest()} in {self.ckpt.path}")

  def end_epoch(self, t: int, e: int, plan: dict, chunks, outs, t0: float, bar) -> None:
    """The epoch's step metrics (checked finite; waits for the device, so the rate is real) averaged into one
    curve row with the degenerate reference values of its batches ``chunks``; progress, bar and TensorBoard."""
    m = self.finite(outs, t, e)  # waits for the epoch's last step
    t_end = time.perf_counter()
    n = m[:, steps.COLUMN["num_valid"]]
    rate = n[len(outs[0]):].sum() / max(t_end - t0, 1e-9)
    m, n = m[n > 0], n[n > 0]
    means = {k: float((n / max(n.sum(), 1)) @ m[:, i]) for k, i in steps.COLUMN.items() if k != "num_valid"}
    lr = float(plan.lrs[-1])
    tc = self.config.train
    refs = health.reference_values(chunks, temperature=tc.temperature, base_temperature=tc.base_temperature)
    self.rs.curves.append({"task": t, "epoch": e + 1, **means, "lr": lr, **refs})
    self.rs.pass_log.append({"task": t, "epoch": e, "step": self.rs.steps_done, "steps": plan.steps,
                             "rows": plan.per_epoch})
    self.rs.steps_done += plan.steps
    self.rs.segment.epoch += 1
    p = self.rs.progress
    p.epoch, p.call, p.partial, p.boundary_done = e + 1, 0, [], False
    p.lr_max = max(p.lr_max, float(np.max(plan.lrs)))
    bar.update(1)
    bar.set_postfix(loss=f"{means['loss']:.3f}", ird=f"{means['ird']:.3f}", lr=f"{lr:.4f}", img_s=f"{rate:.0f}")
    if self.writer:
      for k, v in {**means, "lr": lr}.items():
        self.writer.add_scalar(f"{k}_{t}", v, int(self.state.step))
    clock.add(self.rs.timing, "epoch_end_s", time.perf_counter() - t_end)  # host work after its last step

  def end_task(self, t: int, bar) -> None:
    """Closes the task's progress bar and runs the health checks on it (one line per flag, kept for results)."""
    bar.close()
    c = self.config
    flags = health.task_flags(t, self.rs.curves, lrs=[self.rs.progress.lr_max or c.train.lr],
                              floor=c.train.lr * c.train.lr_min_ratio,
                              boundaries=[b for b in self.rs.boundaries if b["task"] == t],
                              selective=self.method.selective)
    for f in flags:
      tqdm.tqdm.write(f.line(), file=sys.stderr)
    self.rs.health.extend(dataclasses.asdict(f) for f in flags)
