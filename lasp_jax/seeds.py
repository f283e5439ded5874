"""N seeds of one config: ``--config.num_seeds=N``, vmapped or one after another.

Each seed k is the run (train.py) of ``seed + k`` in ``WORKDIR/seed_<k>``,
with its own memory, past model, SD mask, GM salience, data order, augmentation and
(R-MNIST) rotations, its own checkpoints and its own ``results.json``, as a separate
run would write. ``seeds_mode=vmap``: only the training chunks run together: their
states are stacked on a leading axis and one compiled, vmapped chunk trains every
seed (steps.make_chunk_fn); the boundary work (memory, mask search, EB) and the probe
run seed by seed; they are small next to training. ``sequential``: the seeds' runs one
after another (same results), also what ``auto`` does: the vmapped chunk was the
slower way on both machines measured (XLA:CPU, 3 seeds of configs/mnist5k.py: 149 s
against 3 x 33 s; H200, 3 seeds of configs/rmnist.py: 3.7x one seed's epoch time).
``WORKDIR/seeds.md`` holds the mean (std) over the seeds.

Resuming: every seed saves its task-end checkpoint after each task (and mid-task
checkpoints at the same chunks), so the seeds resume together; a seed that is
behind (the process died between two seeds' saves) first catches up on its own.
"""

from __future__ import annotations

import os
import statistics

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from lasp_jax import config_lib, train
from lasp_jax.eval import health, metrics
from lasp_jax.loop import epochs
from lasp_jax.loop.checkpoint import write_text_atomic
from lasp_jax.loop.steps import Batch, make_chunk_fn


def seed_configs(config: ml_collections.ConfigDict) -> list[ml_collections.ConfigDict]:
  """One config per seed: seed + k, num_seeds 1; progress bars for the first only."""
  out = []
  for k in range(config.num_seeds):
    c = config_lib.override(ml_collections.ConfigDict(config.to_dict()), seed=config.seed + k, num_seeds=1)
    c.progress = config.progress and k == 0
    out.append(c)
  return out


def vmapped(config) -> bool:
  """Whether the seeds train as one vmapped program: ``seeds_mode=vmap`` only.

  ``auto`` runs them one after another on every backend: the vmapped chunk was slower
  than the seeds one by one on the 2-core CPU and on an H200 (3 seeds of
  paper-scale R-MNIST: 0.63 s per later-task epoch against 3 x 0.17 s).
  """
  return config.get("seeds_mode", "auto") == "vmap"


def _stack_np(batches):
  return Batch(*[np.stack(f) for f in zip(*batches)])


def _stack(trees):
  return jax.tree.map(lambda *x: jnp.stack(x), *trees)


class SeedGroup:
  """The seeds of one config: trained in lockstep (vmapped) or one after another."""

  def __init__(self, config: ml_collections.ConfigDict, workdir, devices=None):
    self.workdir, self.devices = str(workdir), devices
    self.configs = seed_configs(config)

  def _dir(self, k: int) -> str:
    return os.path.join(self.workdir, f"seed_{k}")

  def run(self) -> list[dict]:
    if vmapped(self.configs[0]):
      results = self._in_lockstep()
    else:
      results = [train.train_and_evaluate(c, self._dir(k), devices=self.devices) for k, c in enumerate(self.configs)]
    write_text_atomic(os.path.join(self.workdir, "seeds.md"), seed_table(results))
    return results

  def _in_lockstep(self) -> list[dict]:
    ctxs, carries = zip(*[train.start(c, self._dir(k), self.devices) for k, c in enumerate(self.configs)])
    where = lambda c: (c.rs.progress.task, c.rs.progress.epoch, c.rs.progress.call)
    ahead = max(where(c) for c in carries)
    for x, c in zip(ctxs, carries):  # a seed saved one task-end checkpoint less than another: it catches up alone
      while where(c) < ahead and c.rs.progress.task < x.stream.num_tasks:
        train.run_task(x, c, c.rs.progress.task)
    executor = VmappedSeeds(ctxs)
    for t in range(carries[0].rs.progress.task, ctxs[0].stream.num_tasks):
      with train.training_clock(carries):
        epochs.train_task(ctxs, carries, t, executor)
      for x, c in zip(ctxs, carries):
        train.after_task(x, c, t)
    return [train.finish(x, c) for x, c in zip(ctxs, carries)]


class VmappedSeeds:
  """The executor of seeds in lockstep (epochs.train_task): their states stacked, one vmapped chunk program."""

  def __init__(self, ctxs):
    x = ctxs[0]
    self.chunk_fn = make_chunk_fn(x.model, x.tx, x.aug_cfg, x.loss_cfg, seeds=len(ctxs),
                                  compiler_options=x.compiler_options)
    self.batch_sharding = NamedSharding(x.mesh, P(None, None, "data"))

  def begin_epoch(self, ctxs, carries, plans) -> None:
    self._state = _stack([c.state for c in carries])
    self._past = None if carries[0].past is None else _stack([c.past for c in carries])
    self._masks = jnp.stack([p.mask for p in plans])
    self._data = carries[0].data._replace(angles=jnp.stack([c.data.angles for c in carries]))

  def execute(self, ctxs, carries, chunks, lrs) -> list:
    batch = jax.device_put(_stack_np(chunks), self.batch_sharding)
    self._state, m = self.chunk_fn(self._state, self._past, self._masks, self._data, batch, lrs)
    return [m[i] for i in range(len(carries))]

  def sync(self, ctxs, carries) -> None:
    """Each seed's carry gets its state (copies: the next chunk donates the stacked state's buffers)."""
    for i, (x, c) in enumerate(zip(ctxs, carries)):
      c.state = jax.device_put(jax.tree.map(lambda v, i=i: jnp.copy(v[i]), self._state), x.replicated)


def mean_result(results: list[dict]) -> dict:
  """The seeds' mean final accuracies (and raw-pixel baseline), in a results.json's shape, for the comparison.

  A seed that failed a health check makes the mean flagged: its checks are named per seed."""
  mean = lambda dicts: {n: statistics.mean(d[n] for d in dicts) for n in dicts[0]}
  out = {"final": mean([r["final"] for r in results]), "num_seeds": len(results)}
  if len(results) > 1:
    out["final_std"] = {n: statistics.stdev(r["final"][n] for r in results) for n in results[0]["final"]}
  pixels = [r.get("baselines", {}).get("raw_pixels") for r in results]
  if all(pixels):
    out["baselines"] = {"raw_pixels": mean(pixels)}
  seeds_of = {}
  for r in results:
    for c in health.flagged_checks(r):  # [] for a healthy seed
      seeds_of.setdefault(c, []).append(str(r["seed"]))
  bad = [f"{c} (seed{'s' if len(s) > 1 else ''} {', '.join(s)})" for c, s in sorted(seeds_of.items())]
  out["health"] = {"ok": not bad, "checks": bad}
  return out


def seed_table(results: list[dict]) -> str:
  """Markdown: each seed's final accuracies (a dagger on a seed that failed a health check) and their mean (std)
  over every seed, then over the healthy seeds alone when some are flagged."""
  names = list(results[0]["final"])
  lines = ["| seed | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
  for r in results:
    lines.append(f"| {r['seed']}{health.mark(r)} | " + " | ".join(f"{r['final'][n]:.2f}" for n in names) + " |")
  healthy = [r for r in results if not health.is_flagged(r)]
  lines.append(_mean_row(f"mean (std), {len(results)} seeds", results, names))
  if len(healthy) < len(results):
    lines.append(_mean_row(f"mean (std), the {len(healthy)} healthy seeds", healthy, names))
    lines.append("")
    lines += [f"† seed {r['seed']}: {', '.join(health.flagged_checks(r))}" for r in results if health.is_flagged(r)]
  return "\n".join(lines) + "\n"


def _mean_row(label: str, results: list[dict], names) -> str:
  cells = [metrics.cell(metrics.mean_std(r["final"][n] for r in results)) if results else "none healthy"
           for n in names]
  return f"| {label} | " + " | ".join(cells) + " |"
