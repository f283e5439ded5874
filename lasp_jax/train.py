"""``train_and_evaluate``: a whole continual-learning run, resumable at any step.

The run is two values (context.py): a :class:`~lasp_jax.loop.context.Context` built once from the config and a
:class:`~lasp_jax.loop.context.Carry` of what changes. :func:`run` is the task loop: per task t its epochs
(epochs.train_task; before an epoch a boundary where one is due, boundary.py: memory, past model, look-ahead),
the read-outs ``config.eval`` names (every task, or the last), a task-end hook, a checkpoint; then the results.
All randomness derives from (seed, segment, epoch, step), so a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time

import jax
import ml_collections
import tqdm

from lasp_jax import config_lib, provenance, report
from lasp_jax.eval import evaluators
from lasp_jax.loop import checkpoint, context, epochs
from lasp_jax.loop.context import Carry, Context
from lasp_jax.platform import clock


def train_and_evaluate(config: ml_collections.ConfigDict, workdir, *, devices=None, on_task_end=None) -> dict:
  """Runs (or resumes) the continual run described by ``config`` in ``workdir``; returns its results.json.
  ``on_task_end(ctx, carry, t)`` may return a JSON-able dict kept under results['extra']."""
  return run(*start(config, workdir, devices), on_task_end=on_task_end)


def build(config: ml_collections.ConfigDict, workdir, devices=None) -> tuple[Context, Carry]:
  """The run's context and its fresh carry (nothing restored, nothing written but the workdir)."""
  ctx = context.build(config, workdir, devices)
  return ctx, context.fresh(ctx)


def start(config: ml_collections.ConfigDict, workdir, devices=None) -> tuple[Context, Carry]:
  """The run's context and carry (resumed: :func:`resume`)."""
  ctx, carry = build(config, workdir, devices)
  return ctx, resume(ctx, carry)


def resume(ctx: Context, carry: Carry) -> Carry:
  """The carry to train on: the workdir's newest checkpoint if there is one (and ``config.resume`` allows),
  else ``carry``; writes config.json, starts this process's clocks and opens the TensorBoard writer."""
  restored = context.restore(ctx, carry)
  checkpoint.write_json_atomic(ctx.workdir / "config.json",
                               {**config_lib.flat(ctx.config), "provenance": provenance.provenance()})
  if restored:
    p = restored.rs.progress
    tqdm.tqdm.write(f"resuming {ctx.workdir}: task {p.task}, epoch {p.epoch}, chunk {p.call}", file=sys.stderr)
  carry = restored or carry
  carry.started, carry.compile_start = time.perf_counter(), clock.compile_seconds()
  carry.writer = report.tensorboard_writer(ctx.workdir)
  return carry


def run(ctx: Context, carry: Carry, *, on_task_end=None) -> dict:
  """The task loop, from the carry's task to the last; returns results.json (also written to the workdir)."""
  for t in range(carry.rs.progress.task, ctx.stream.num_tasks):
    run_task(ctx, carry, t, on_task_end)
  return finish(ctx, carry)


def run_task(ctx: Context, carry: Carry, t: int, on_task_end=None) -> None:
  """Task t: its epochs (a boundary before an epoch where one is due), then read-outs, hook, checkpoint."""
  with training_clock([carry]):  # train_s: the epochs, less the boundaries (their own phase)
    epochs.train_task([ctx], [carry], t, epochs.OneRun())
  after_task(ctx, carry, t, on_task_end)


def after_task(ctx: Context, carry: Carry, t: int, on_task_end=None) -> None:
  """The method's end of task t (Method.end_task), the read-outs after it (every task, or the last), the task-end
  hook, the next task's progress and a checkpoint."""
  carry.state = ctx.method.end_task(carry.state, carry.past, context.task_data(ctx, carry, t))
  if ctx.config.eval.every_task or t == ctx.stream.num_tasks - 1:
    checkpoint.fault_point(f"probe:{t}")
    evaluate_task(ctx, carry, t)
  if on_task_end is not None:
    carry.rs.extra.append({"task": t, **(on_task_end(ctx, carry, t) or {})})
  carry.rs.progress = dataclasses.replace(carry.rs.progress, task=t + 1, epoch=0, call=0, boundary_done=False,
                                          partial=[], lr_max=0.0)
  context.save(ctx, carry)


def readout_inputs(ctx: Context, carry: Carry) -> evaluators.Inputs:
  """The values every read-out reads, as they are now (evaluators.Inputs)."""
  return evaluators.Inputs(ctx.model, carry.state.variables(), carry.data, ctx.test_data, ctx.stream, carry.memory,
                           ctx.aug_cfg, ctx.config, ctx.validation, carry.state.memory)


def evaluate_task(ctx: Context, carry: Carry, t: int) -> None:
  """The read-out ``eval.probe`` names after task t; after the last, the raw-pixel baseline (its own timing
  phase, ``baselines_s``: ``probe_s`` is the work the published code also does) and ``eval.final_readouts``."""
  rs, inputs = carry.rs, readout_inputs(ctx, carry)

  def readout():  # the probe data (features) and the read-out on them: one phase, as the published code times it
    pd = evaluators.probe_data(inputs, t)
    return pd, evaluators.EVALUATORS[ctx.method.readout(ctx.config)](inputs, t, pd)

  pd, res = context.timed(carry, "probe_s", readout)
  rs.record_readout(t, res)
  if carry.writer:
    for name, value in res.overall.items():
      carry.writer.add_scalar(f"probe/{name}", value, t)
  if t == ctx.stream.num_tasks - 1:
    if ctx.config.eval.raw_pixels:
      rs.baselines = {"raw_pixels": context.timed(carry, "baselines_s", evaluators.raw_pixels, inputs, t, pd)}
    rs.readouts, rs.validation = context.timed(carry, "probe_s", evaluators.final_readouts, inputs, t, pd,
                                               ctx.method.readout(ctx.config))


def finish(ctx: Context, carry: Carry) -> dict:
  """results.json from the carry (written atomically), the run's pictures; closes the writer and checkpointer."""
  clock.add(carry.rs.timing, "compile_s", clock.compile_seconds() - carry.compile_start)  # inside the phases
  results = report.results(ctx.config, ctx.stream, carry.rs,
                           wall_time_s=carry.rs.wall_time_s + time.perf_counter() - carry.started)
  checkpoint.write_json_atomic(ctx.workdir / "results.json", results)
  if ctx.config.pictures:
    report.run_pictures(results, ctx.workdir)
  if carry.writer:
    carry.writer.close()
  ctx.ckpt.close()
  return results


@contextlib.contextmanager
def training_clock(carries):
  """Adds the wall seconds of the block (task t's epochs of the runs), less the boundaries it ran (their own
  phase, ``boundary_s``), to every run's ``train_s``: a shared program's time is every seed's."""
  before = [(c.rs.timing.get("boundary_s", 0.0), c.rs.timing.get("boundary_compile_s", 0.0)) for c in carries]
  t0, c0 = time.perf_counter(), clock.compile_seconds()
  yield
  jax.block_until_ready([c.state.params for c in carries])
  spent = sum(c.rs.timing.get("boundary_s", 0.0) - b for c, (b, _) in zip(carries, before))
  compiled = clock.compile_seconds() - c0 - sum(c.rs.timing.get("boundary_compile_s", 0.0) - bc
                                                for c, (_, bc) in zip(carries, before))
  elapsed = time.perf_counter() - t0 - spent
  for c in carries:
    clock.add(c.rs.timing, "train_s", elapsed)
    clock.add(c.rs.timing, "train_compile_s", compiled)  # of train_s
