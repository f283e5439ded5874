"""Task-free LASP: the same runs with the task boundaries given and detected, side by side.

    python -m experiments.task_free [--points=mnist5k,mnist5k_rot,rmnist_cpu_p1] [--seeds=3] [--method=sd]

Each point is a repository config (``configs/<point>.py``): Split-MNIST5k (Class-IL, label-novelty detector),
Rotated MNIST5k (Domain-IL, 2 passes per later domain: a detector must also stay quiet inside a domain) and
Rotated MNIST on 2 cores (Domain-IL, embedding-shift detector). Every run lives in
``results/task_free/runs/<point>_<method>_<boundaries>_seed<k>/`` (results.json; checkpoints removed when
it finishes); a rerun skips finished runs. Writes ``results/task_free/table.md`` and ``runs.json``: per seed
the final accuracy with given and with detected boundaries, the detection's precision, recall and delay,
and each run's health; then each given run beside finetune and joint (given boundaries, same seed) and the raw
pixels.
"""

from __future__ import annotations

import importlib
import pathlib

from absl import flags, logging

from experiments import aggregate, runner, studies
from lasp_jax import config_lib, errors
from lasp_jax.eval import health
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic
from lasp_jax.platform import xla_cache

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line (defined when run as a script only: importing the module defines no flags)."""
  flags.DEFINE_list("points", ["mnist5k", "mnist5k_rot", "rmnist_cpu_p1"],
                    "Configs (configs/<name>.py, or rmnist_cpu_p1: results/lasp_gain's p1) to compare.")
  flags.DEFINE_integer("seeds", 3, "Seeds 0..N-1.", lower_bound=1)
  flags.DEFINE_string("method", "sd", "Method of every run.")
  flags.DEFINE_string("results", "results/task_free", "Output folder.")


def base_config(point: str):
  """A point's config: ``configs/<point>.py``, or ``rmnist_cpu_p1``, Rotated MNIST at results/lasp_gain's point p1
  (10,000 digits x 5 domains, 2 + 4 x 1 epochs under the per-step cosine, the published head)."""
  if point == "rmnist_cpu_p1":
    p1 = next(p for p in studies.GAIN_POINTS if p.name == "p1")
    return config_lib.override(studies.gain_config(p1, "sd", "", 0).copy_and_resolve_references())
  return importlib.import_module(f"configs.{point}").get_config()


def run_config(point: str, method: str, boundaries: str, seed: int):
  config = base_config(point)
  config.unlock()
  return config_lib.override(config, method=method, boundaries=boundaries, seed=seed, pictures=False,
                             progress=False)


def run_one(root: pathlib.Path, point: str, method: str, boundaries: str, seed: int, train: bool = True) -> dict:
  """The cell's results (trained unless ``train`` is False: then only read)."""
  wd = root / "runs" / f"{point}_{method}_{boundaries}_seed{seed}"
  return runner.run_or_skip(wd, run_config(point, method, boundaries, seed)) if train else runner.outcome(wd)


def metric(results: dict) -> str:
  return next(iter(results["final"]))


def mean_std(xs) -> str:
  return aggregate.cell(aggregate.mean_std(xs))


def flags_of(results: dict) -> str:
  """The run's failed checks as today's checks read its curves (health.recheck), or "ok"."""
  return ", ".join(sorted({f.check for f in health.recheck(results)})) or "ok"


def point_table(point: str, pairs: list[tuple[dict, dict, dict]]) -> list[str]:
  """Rows of one point: a line per seed, then the means; then the same runs beside their bounds."""
  m = metric(pairs[0][0])
  rows = []
  for g, d, _ in pairs:
    bd = d["boundary_detection"]
    delay = "-" if bd["mean_delay_steps"] is None else f"{bd['mean_delay_steps']:.1f}"
    rows.append([g["seed"], f"{g['final'][m]:.2f}", f"{d['final'][m]:.2f}", f"{d['final'][m] - g['final'][m]:+.2f}",
                 f"{bd['precision']:.2f}", f"{bd['recall']:.2f}", delay, f"{bd['detected']} ({bd['true']})",
                 f"{flags_of(g)} / {flags_of(d)}"])
  gap = [d["final"][m] - g["final"][m] for g, d, _ in pairs]
  _, interval, word = aggregate.interval_cell(gap)
  rows.append(["mean (std)", mean_std([g["final"][m] for g, _, _ in pairs]),
               mean_std([d["final"][m] for _, d, _ in pairs]), f"{mean_std(gap)}; 95 % interval {interval}, {word}",
               mean_std([d["boundary_detection"]["precision"] for _, d, _ in pairs]),
               mean_std([d["boundary_detection"]["recall"] for _, d, _ in pairs]), "", "", ""])
  header = ["seed", "given", "detected", "detected - given", "precision", "recall", "mean delay (steps)",
            "detected at (true)", "health given / detected"]
  return ([f"### {point} ({m}, method {pairs[0][0]['method']})", "", aggregate.markdown_table(header, rows), ""]
          + bounds_table(m, pairs))


def bounds_table(m: str, pairs) -> list[str]:
  """The given-boundary run beside its bounds, seed by seed: finetune, joint, raw pixels (flagged runs in the
  means)."""
  rows = [[g["seed"], f"{g['final'][m]:.2f}", f"{b['finetune']['final'][m]:.2f}", f"{b['joint']['final'][m]:.2f}",
           f"{g['baselines']['raw_pixels'][m]:.2f}", f"{flags_of(b['finetune'])} / {flags_of(b['joint'])}"]
          for g, _, b in pairs]
  col = lambda f: mean_std([f(p) for p in pairs])
  rows.append(["mean (std)", col(lambda p: p[0]["final"][m]), col(lambda p: p[2]["finetune"]["final"][m]),
               col(lambda p: p[2]["joint"]["final"][m]), col(lambda p: p[0]["baselines"]["raw_pixels"][m]), ""])
  header = ["seed", "method (given)", "finetune", "joint", "raw pixels", "health finetune / joint"]
  return [aggregate.markdown_table(header, rows), ""]


def collect(root: pathlib.Path, points, seeds: int, method: str, train: bool = True):
  """(table lines, runs.json rows) of every point and seed; ``train``: run the cells that have not ended."""
  table = ["Mean (std) over seeds, **flagged runs included** (each run's checks are in its row).", ""]
  runs = []
  for point in points:
    pairs = []
    for seed in range(seeds):
      pair = tuple(run_one(root, point, method, b, seed, train) for b in ("given", "detected"))
      bounds = {b: run_one(root, point, b, "given", seed, train) for b in ("finetune", "joint")}
      pairs.append(pair + (bounds,))
      runs.extend({"point": point, "boundaries": b, "seed": seed, "final": r["final"],
                   "boundary_detection": {k: v for k, v in r.get("boundary_detection", {}).items()
                                          if k != "observations"},
                   "health": r["health"]["checks"], "commit": r["provenance"].get("git_commit")}
                  for b, r in zip(("given", "detected"), pair))
      if train:
        print(f"{point} seed {seed}: given {pair[0]['final']}, detected {pair[1]['final']}, "
              f"detection {runs[-1]['boundary_detection']}", flush=True)
    table += point_table(point, pairs)
  return table, runs


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  xla_cache.enable("~/.cache/lasp_jax/xla")
  configs = pathlib.Path(__file__).resolve().parents[1] / "configs"
  unknown = [p for p in FLAGS.points if p != "rmnist_cpu_p1" and not (configs / f"{p}.py").is_file()]
  if unknown:
    raise errors.ConfigError(f"unknown --points {', '.join(unknown)}: expected rmnist_cpu_p1 or a configs/<name>.py")
  root = pathlib.Path(FLAGS.results)
  table, runs = collect(root, FLAGS.points, FLAGS.seeds, FLAGS.method)
  write_text_atomic(root / "table.md", "\n".join(table))
  write_json_atomic(root / "runs.json", runs)
  print("\n".join(table))


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
