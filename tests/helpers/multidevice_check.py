"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=4 by test_multidevice.py.

Trains the same chunk of steps, runs the mask search and the probe on a 1-device
mesh and on a 4-device ("data",) mesh, and saves both results for comparison; and a
2-seed group's chunk, vmapped on 4 devices against each seed's own chunk on 1 device.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax import seeds, train
from lasp_jax.loop.steps import Batch
from lasp_jax.method import lookahead, pools
from tests.conftest import Run, past_model, placed_chunk, tiny_config


def check_config(**kw):
  return tiny_config(**{"data.num_tasks": 2, "model.name": "resnet18", "model.width": 0.0625,
                          "model.num_blocks": (1, 1), "train.batch_size": 16, "train.steps_per_call": 2,
                          "augment.size": 28, "eval.epochs": 2, "eval.probe": "sgd", **kw})  # the compiled probe


def check_run(devices, workdir):
  return Run(check_config(), workdir, devices=devices)


def seed_chunks(devices, workdir, vmapped: bool):
  """One chunk (2 steps, a past model) of each seed of a 2-seed group (seeds.py) on ``devices``: their params
  stacked, seeds on the leading axis. ``vmapped``: the group's vmapped program; else each seed's own run's
  chunk, one after another (train_chunk's program: nothing more to compile)."""
  configs = seeds.seed_configs(check_config(num_seeds=2))
  runs = [Run(c, f"{workdir}/seed_{k}", devices=devices) for k, c in enumerate(configs)]
  stack = lambda trees: jax.tree.map(lambda *x: jnp.stack(x), *trees)  # seeds on a new leading axis
  chunks = [r.epoch_chunks(r.epoch_plan(0))[0][0] for r in runs]
  pasts = [past_model(r) for r in runs]
  if vmapped:
    executor = seeds.VmappedSeeds([r.ctx for r in runs])
    batch = jax.device_put(Batch(*[np.stack(f) for f in zip(*chunks)]), executor.batch_sharding)
    data = runs[0].data._replace(angles=jnp.stack([r.data.angles for r in runs]))
    state, metrics = executor.chunk_fn(stack([r.state for r in runs]), stack(pasts),
                                       jnp.ones((2, 16), bool), data, batch, jnp.full((2,), 0.05))
  else:
    state, metrics = stack([r.chunk_fn(r.state, p, jnp.ones(16, bool), r.data, jax.device_put(c, r.batch_sharding),
                                       jnp.full((2,), 0.05)) for r, p, c in zip(runs, pasts, chunks)])
  return {f"v{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(state.params))} | {
      "vmetrics": np.asarray(metrics)}


def train_chunk(devices, workdir, run=None):
  """One chunk of 2 steps with a past model, on a ("data",) mesh over ``devices``: (state, metrics)."""
  run = run or check_run(devices, workdir)
  chunk, past = placed_chunk(run, 2)
  return run.chunk_fn(run.state, past, jnp.ones(16, bool), run.data, chunk, jnp.full(2, 0.05))


def run_on(devices, workdir, reference_state=None):
  """Trains one chunk; then (from ``reference_state`` if given, so that both meshes
  start from identical weights) runs the mask search, EB and the probe."""
  run = check_run(devices, workdir)
  pool = pools.training_pool(run.stream, run.memory, 0)
  state, metrics = train_chunk(devices, workdir, run)
  trained = jax.tree.map(np.asarray, state)
  # The search (lr 100, 50 steps) amplifies float-rounding differences of the
  # weights; compare it, EB and the probe from the same weights on both meshes.
  state = jax.device_put(reference_state if reference_state is not None else trained, run.replicated)
  run.state = state
  rows = lookahead.lookahead_rows(pool, pool, "onlycurrent", 16, np.random.default_rng(1))
  res = lookahead.boundary(jax.random.PRNGKey(0), run.model, state.variables(), run.data,
                           jax.tree.map(jnp.asarray, rows), aug_cfg=run.aug_cfg, loss_cfg=run.loss_cfg,
                           lasp_cfg=run.config.lasp, num_classes=10, need_gamma=True)
  train.evaluate_task(run.ctx, run.carry, 0)
  flat = {f"p{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(trained.params))}
  flat.update({f"s{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(trained.batch_stats))})
  flat.update({f"g{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(res.gamma))})
  return dict(flat, metrics=np.asarray(metrics), mask=res.mask,
              acc=np.asarray(run.rs.acc["class_il"][0][0])), trained


if __name__ == "__main__":
  assert jax.device_count() == 4, jax.devices()
  one, trained = run_on(jax.devices()[:1], sys.argv[1] + "/one")
  four, _ = run_on(jax.devices(), sys.argv[1] + "/four", reference_state=trained)
  # Seeds: vmapped on 4 devices = each seed's own chunk on 1 device.
  one.update(seed_chunks(jax.devices()[:1], sys.argv[1] + "/vone", vmapped=False))
  four.update(seed_chunks(jax.devices(), sys.argv[1] + "/vfour", vmapped=True))
  np.savez(sys.argv[1] + "/out.npz", **{f"one_{k}": v for k, v in one.items()},
           **{f"four_{k}": v for k, v in four.items()})
