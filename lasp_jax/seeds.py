"""N seeds of one config: ``--config.num_seeds=N``, vmapped or one after another.

Each seed k is a :class:`train.ContinualRun` of ``seed + k`` in ``WORKDIR/seed_<k>``,
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

import functools
import os
import statistics

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from lasp_jax import config_lib, epochs, health, metrics
from lasp_jax.checkpoint import write_text_atomic
from lasp_jax.steps import Batch, make_chunk_fn
from lasp_jax.train import ContinualRun, charge_training


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
    self.workdir = str(workdir)
    self.runs = [ContinualRun(c, os.path.join(self.workdir, f"seed_{k}"), devices=devices)
                 for k, c in enumerate(seed_configs(config))]

  @functools.cached_property
  def executor(self) -> "VmappedSeeds":
    return VmappedSeeds(self.runs)

  def run(self) -> list[dict]:
    results = self._in_lockstep() if vmapped(self.runs[0].config) else [r.run() for r in self.runs]
    write_text_atomic(os.path.join(self.workdir, "seeds.md"), seed_table(results))
    return results

  def _in_lockstep(self) -> list[dict]:
    for r in self.runs:
      r.start()
    where = lambda r: (r.rs.progress.task, r.rs.progress.epoch, r.rs.progress.call)
    ahead = max(where(r) for r in self.runs)
    for r in self.runs:  # a seed saved one task-end checkpoint less than another: it trains alone to catch up
      while where(r) < ahead and r.rs.progress.task < r.stream.num_tasks:
        r.run_task(r.rs.progress.task)
    for t in range(self.runs[0].rs.progress.task, self.runs[0].stream.num_tasks):
      charge_training(self.runs, lambda t: epochs.train_task(self.runs, t, self.executor), t)
      for r in self.runs:
        r.after_task(t)
    return [r.finish() for r in self.runs]


class VmappedSeeds:
  """The executor of seeds in lockstep (epochs.train_task): their states stacked, one vmapped chunk program."""

  def __init__(self, runs):
    r = runs[0]
    self.chunk_fn = make_chunk_fn(r.model, r.tx, r.aug_cfg, r.loss_cfg, seeds=len(runs),
                                  compiler_options=r.compiler_options)
    self.batch_sharding = NamedSharding(r.mesh, P(None, None, "data"))

  def begin_epoch(self, runs, plans) -> None:
    self._state = _stack([r.state for r in runs])
    self._past = None if runs[0].past is None else _stack([r.past for r in runs])
    self._masks = jnp.stack([p.mask for p in plans])
    self._data = runs[0].data._replace(angles=jnp.stack([r.data.angles for r in runs]))

  def execute(self, runs, chunks, lrs) -> list:
    batch = jax.device_put(_stack_np(chunks), self.batch_sharding)
    self._state, m = self.chunk_fn(self._state, self._past, self._masks, self._data, batch, lrs)
    return [m[i] for i in range(len(runs))]

  def sync(self, runs) -> None:
    """Each run gets its seed's state (copies: the next chunk donates the stacked state's buffers)."""
    for i, r in enumerate(runs):
      r.state = jax.device_put(jax.tree.map(lambda x, i=i: jnp.copy(x[i]), self._state), r.replicated)


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
