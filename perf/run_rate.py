"""A whole run's training rate against the rate of its steps alone: where the time between steps goes.

    python -m perf.run_rate [--config=configs/rmnist_cpu.py] [--config.data.num_tasks=4 ...] [--out=FILE.json]

Trains the config once (its compiled programs come from the persistent cache when they are there), then times
the same compiled chunk alone on a full chunk of task 0's data, without a past model (task 0's steps) and with
one (a distilling method's later steps), and prints: the run's steps per second of ``train_s``, its steps' own
rate (each pass's steps at its chunk's rate), their ratio; the run's samples per second (the epochs' real rows,
padding not counted) against its full steps' (a batch of real rows per step), their ratio; and
``results.json["timing"]`` (compile, the host work around each epoch, checkpoints, boundaries, probe). One run,
one machine: figures to compare, not to assert. ``--config.train.tail_multiple=32``: short last steps at their
rows instead of padded to the batch.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags, logging
from ml_collections import config_flags

from lasp_jax import config_lib, errors, provenance, train
from lasp_jax.loop import steps
from lasp_jax.loop.checkpoint import write_json_atomic
from lasp_jax.method import pools
from lasp_jax.platform import xla_cache

_CONFIG = config_flags.DEFINE_config_file("config", "configs/rmnist_cpu.py", "The run's configuration.")
_OUT = flags.DEFINE_string("out", "", "JSON output (optional).")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls of the chunk alone.", lower_bound=1)


def chunk_seconds(ctx, carry, repeats: int, with_past: bool) -> float:
  """Median seconds per step of the run's compiled chunk on a full chunk of task 0's pool, with a past model (as
  a distilling method's later tasks run it) or without (as task 0 runs it)."""
  c = ctx.config
  pool = pools.training_pool(ctx.stream, carry.memory, 0)
  b = steps.epoch_batches(pool, c.train.batch_size, c.train.steps_per_call, np.random.default_rng(0))
  chunk = jax.device_put(steps.Batch(*[f[0] for f in b]), ctx.batch_sharding)
  past = steps.PastModel(*jax.tree.map(jnp.copy, (carry.state.params, carry.state.batch_stats))) \
      if with_past else None
  mask, lrs = jnp.asarray(carry.rs.mask, bool), jnp.full((c.train.steps_per_call,), c.train.lr * 1e-3)
  real = int(np.asarray(jnp.sum(jnp.any(chunk.valid, axis=-1))))
  times = []
  for _ in range(repeats + 1):
    t = time.perf_counter()
    carry.state, m = ctx.chunk_fn(carry.state, past, mask, carry.data, chunk, lrs)
    jax.block_until_ready(m)
    times.append(time.perf_counter() - t)
  return statistics.median(times[1:]) / real


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  xla_cache.enable()
  config = _CONFIG.value  # with its --config.KEY=VALUE overrides
  config_lib.override(config, progress=False, pictures=False)
  with tempfile.TemporaryDirectory() as wd:
    ctx, carry = train.start(config, wd)
    res = train.run(ctx, carry)
    # Task 0 runs the chunk without a past model; a distilling method's later tasks with one (a dearer step).
    alone = {False: chunk_seconds(ctx, carry, _REPEATS.value, False)}
    alone[True] = chunk_seconds(ctx, carry, _REPEATS.value, True) if ctx.method.distills else alone[False]
  timing = res["timing"]
  steps_done = sum(p["steps"] for p in carry.rs.pass_log)
  # The steps' own time: each pass's steps at the rate of the chunk it ran.
  steps_s = sum(p["steps"] * alone[p["task"] > 0] for p in carry.rs.pass_log)
  step_s = steps_s / steps_done
  run_rate = steps_done / timing["train_s"]
  rows = sum(p["rows"] for p in carry.rs.pass_log)
  sample_rate, full_rate = rows / timing["train_s"], config.train.batch_size / step_s
  warm_rate = steps_done / (timing["train_s"] - timing.get("train_compile_s", 0.0))
  overrides = [a for a in sys.argv[1:] if a.startswith("--config.")]
  out = {"config": _CONFIG.value.get("dataset"), "overrides": overrides, "steps": steps_done,
         "batch": config.train.batch_size, "run_steps_per_s": round(run_rate, 3),
         "chunk_steps_per_s": round(1 / step_s, 3),
         "chunk_s_per_step": {"task_0": round(alone[False], 4), "later_tasks": round(alone[True], 4)},
         "ratio": round(run_rate * step_s, 3),
         "ratio_without_compile": round(warm_rate * step_s, 3), "rows": rows,
         "run_samples_per_s": round(sample_rate, 1), "full_step_samples_per_s": round(full_rate, 1),
         "samples_ratio": round(sample_rate / full_rate, 3), "timing": timing,
         "wall_time_s": res["wall_time_s"], "provenance": provenance.provenance()}
  print(f"{steps_done} steps of batch {config.train.batch_size}: the run trains {run_rate:.2f} steps/s of train_s "
        f"({timing['train_s']:.1f} s), its chunks alone {1 / step_s:.2f} steps/s "
        f"(task 0 {alone[False] * 1e3:.0f} ms a step, later tasks {alone[True] * 1e3:.0f} ms): "
        f"ratio {run_rate * step_s:.3f}; "
        f"{warm_rate * step_s:.3f} without the compilation inside train_s")
  print(f"{rows} real rows ({steps_done} steps of {config.train.batch_size} would hold "
        f"{steps_done * config.train.batch_size}): the run trains {sample_rate:.0f} "
        f"samples/s of train_s, its full steps {full_rate:.0f}: ratio {sample_rate / full_rate:.3f}")
  print("timing (s): " + ", ".join(f"{k} {v}" for k, v in timing.items()))
  if _OUT.value:
    write_json_atomic(_OUT.value, out)


if __name__ == "__main__":
  errors.run_app(main)
