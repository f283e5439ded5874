"""The epoch loop of a task, one run or several seeds in lockstep: chunks, mid-epoch checkpoints, epoch ends."""

from __future__ import annotations

from lasp_jax import checkpoint, steps


def train_in_lockstep(runs, t: int, executor) -> None:
  """Task t's epochs for ``runs`` in lockstep (one run, or seeds sharing one vmapped program): the same chunk
  loop, mid-epoch checkpoints and epoch ends for each; ``executor`` trains a chunk of every run
  (``execute(chunks, lrs) -> per-run metrics``) and writes the states back into the runs (``sync``).

  Before every epoch each run may open a new segment (``before_epoch``: memory, past model, mask search), so
  the plan (pool, learning rates, mask) is each epoch's."""
  prog0, spc = runs[0].host["progress"], runs[0].config.train.steps_per_call
  bars = [r.progress_bar(t, r.task_epochs(t)) for r in runs]
  every = runs[0].config.train.checkpoint_every_steps
  for e in range(prog0["epoch"], runs[0].task_epochs(t)):
    for r in runs:
      r.before_epoch(t)
    plans = [r.epoch_plan(t) for r in runs]
    executor.begin_epoch(plans)
    per_run = [r.epoch_chunks(p) for r, p in zip(runs, plans)]
    lr_e = per_run[0][1]  # one schedule for every run
    starts = [r.epoch_start() for r in runs]
    for k in range(prog0["call"], len(lr_e)):
      ms = executor.execute([chunks[k] for chunks, _ in per_run], steps.pad_lrs(lr_e[k], spc))
      for (_, outs), m in zip(starts, ms):
        outs.append(m)
      if every and k + 1 < len(lr_e) and steps.checkpoint_due(lr_e, k, every):
        executor.sync()
        for r, (_, outs) in zip(runs, starts):
          r.save_mid_epoch(t, e, k, outs)
        checkpoint.fault_point(f"step:{t}:{e}:{k + 1}")
    executor.sync()
    for r, p, (chunks, _), (t0, outs), bar in zip(runs, plans, per_run, starts, bars):
      r.end_epoch(t, e, p, chunks, outs, t0, bar)
  for r, bar in zip(runs, bars):
    r.end_task(t, bar)
