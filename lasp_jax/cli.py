"""What ``lasp-jax`` does once its flags are read: the run (or its seeds), the bounds beside it, the summary."""

from __future__ import annotations

import os
import time

from lasp_jax import report, seeds, train
from lasp_jax.eval import baselines as baselines_lib
from lasp_jax.eval import health
from lasp_jax.platform import xla_cache


def run_command(config, workdir: str, *, baselines: bool = False, compile_cache: str = "") -> dict:
  """Trains ``config`` into ``workdir`` (``num_seeds`` > 1: every seed, WORKDIR/seed_<k>/), with finetune and joint
  in WORKDIR/baselines/ when ``baselines``; prints the summary or the comparison; returns {method: results}."""
  started = time.perf_counter()
  xla_cache.enable(compile_cache)
  runs = {config.method: (config, workdir)}
  if baselines:
    runs.update({name: (baselines_lib.baseline_config(config, name), os.path.join(workdir, "baselines", name))
                 for name in baselines_lib.names(config.method) if name != config.method})
  results = {}
  for name, (cfg, wd) in runs.items():
    results[name] = _train(cfg, wd, name)
    if len(runs) > 1:  # each run's line as it ends
      print(f"{name} done: " + ", ".join(f"{m} {v:.2f}" for m, v in results[name]["final"].items())
            + f" ({health.mark(results[name]) or 'healthy'}, {results[name].get('wall_time_s', 0):.1f} s)",
            flush=True)
  if config.num_seeds == 1:
    print(report.summary(results[config.method]))
  pictures = []
  if len(results) > 1:
    print(baselines_lib.comparison(results))
    if config.pictures:
      pictures.append(os.path.join(workdir, "comparison.png"))
      what = f", mean ± std of {config.num_seeds} seeds" if config.num_seeds > 1 else f" seed {config.seed}"
      report.comparison_chart(results, pictures[-1], what=f"{config.dataset}{what}")
  runs_dir = os.path.join(workdir, "seed_*" if config.num_seeds > 1 else "")
  if config.pictures:
    pictures[:0] = [os.path.join(runs_dir, name) for name in ("acc_matrix.png", "curves.png")]
    print(f"pictures: {', '.join(pictures)}")
  print(f"results: {os.path.join(runs_dir, 'results.json')}")
  print(f"wall time: {time.perf_counter() - started:.1f} s in all" + (
      " (" + ", ".join(f"{n} {r.get('wall_time_s', 0):.1f} s" for n, r in results.items()) + ")"
      if len(results) > 1 else ""))
  return results


def _train(config, workdir: str, name: str) -> dict:
  """One run's results, or the seeds' mean (their table printed) when ``num_seeds`` > 1."""
  if config.num_seeds == 1:
    return train.train_and_evaluate(config, workdir)
  per_seed = seeds.SeedGroup(config, workdir).run()
  how = "vmapped" if seeds.vmapped(config) else "one after another"
  print(f"{name}, {config.num_seeds} seeds ({how}):\n{seeds.seed_table(per_seed)}")
  return seeds.mean_result(per_seed)

