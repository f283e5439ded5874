"""Reproduces the paper's tables and figure: one command per result.

    python -m experiments.run table1|table2|embedding|table3|all --scale=small|paper [--seeds=N]
        [--dry_run]          # list the grid (validated configs, workdirs, finished or not)
        [--aggregate_only]   # tabulate finished runs only

Every run gets its own workdir named by the hash of its config under
``results/<experiment>/<scale>/runs/``; a rerun skips finished runs and resumes
unfinished ones, and a failed run is reported without stopping the grid.
Outputs per experiment: ``table.md`` (paper layout, paper number and difference
beside each cell), ``table.csv``, ``runs.json``, PNG plots, and for every run an
accuracy-matrix heat map and training curves.

``--scale=small`` runs the same grids on the offline MNIST5k data (Split-MNIST5k
stands in for the class-incremental datasets, Rotated MNIST5k for R-MNIST) with
a half-width network and few epochs; ``--scale=paper`` uses configs/cifar10.py,
configs/tinyimagenet.py and configs/rmnist.py (datasets and a GPU needed).
"""

from __future__ import annotations

import json
import pathlib
import traceback

from absl import app, flags, logging

from configs import cifar10, mnist5k, mnist5k_rot, rmnist, tiny, tinyimagenet
from experiments import aggregate, plots, runner, subsets
from lasp_jax import config_lib, errors, report, train
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic
from lasp_jax.platform import xla_cache

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags (defined only when it runs: the tests import this module beside others)."""
  flags.DEFINE_enum("scale", "small", ["small", "paper", "tiny"], "Grid scale (tiny: smoke tests only).")
  flags.DEFINE_integer("seeds", 3, "Seeds per grid point (the paper used 5).", lower_bound=1)
  flags.DEFINE_string("results", "results", "Output root.")
  flags.DEFINE_list("methods", list(("co2l", "sd", "gm", "sd_gm")), "Methods of the Table 1 grid.")
  flags.DEFINE_list("memories", None, "Memory sizes of the Table 1 grid (default: 200,500 at paper scale; 500, the "
                    "size of Table 2 and the embedding figure, at the small scale, to fit an hour on 2 cores).")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")
  flags.DEFINE_bool("dry_run", False,
                    "List each grid's runs (validated configs, workdirs, finished or not); start nothing.")
  flags.DEFINE_bool("aggregate_only", False, "Tabulate finished runs only; start nothing.")


METHODS = ("co2l", "sd", "gm", "sd_gm")
# Rows of every table: the lower and upper bound (a raw-pixel classifier is in every run's results).
BASELINES = config_lib.BASELINES
SRS = ("onlypast", "combined", "onlycurrent")


def dataset_configs(scale: str) -> dict:
  """Column group -> a get_config() for that dataset at this scale."""
  if scale == "paper":
    return {"cifar10": cifar10.get_config, "tiny": tinyimagenet.get_config, "rmnist": rmnist.get_config}
  if scale == "tiny":  # seconds per run: for the smoke tests of this script

    def tiny_split():
      c = tiny.get_config()
      c.data.num_tasks, c.train.epochs_first, c.train.epochs = 2, 1, 1
      return c
    return {"cifar10": tiny_split}

  def small_split():
    # The offline default (configs/mnist5k.py: BatchNorm net, batch 64, per-step cosine, every task
    # trains, converged readout) at half width to fit the grid in an hour on 2 cores.
    c = mnist5k.get_config()
    c.model.width = 0.5
    c.model.head_center = False  # results/*/small were measured with the uncentred head
    return c

  def small_rot():
    # Rotated MNIST5k: 2 + 1 epochs of 4,000 digits per domain at batch 128 under the per-step cosine
    # (the published per-epoch cosine would run every 1-epoch task at lr * 1e-3), converged readout.
    c = mnist5k_rot.get_config()
    c.model.width, c.train.epochs_first, c.train.epochs, c.train.batch_size = 0.5, 2, 1, 128
    return c

  # Split-MNIST5k stands in for both class-incremental columns at the small scale.
  return {"cifar10": small_split, "rmnist": small_rot}


def column_names(scale: str) -> dict:
  """Column group -> the dataset name printed in the tables (the stand-in's at the small scale)."""
  if scale == "small":
    return {"cifar10": "Split-MNIST5k (vs SplitCIFAR10)", "tiny": "SplitTinyImageNet",
            "rmnist": "Rot-MNIST5k (vs R-MNIST)"}
  return {"cifar10": "SplitCIFAR10", "tiny": "SplitTinyImageNet", "rmnist": "R-MNIST"}


def make_config(base, **overrides):
  return config_lib.resolved(config_lib.override(base(), progress=False, **overrides))


def run_grid(exp_dir: pathlib.Path, configs, on_task_end=None) -> list:
  """Runs (or skips, or resumes) every config; returns one record per run."""
  records = []
  for tags, config in configs:
    wd = workdir_of(exp_dir, config, borrow=on_task_end is None)  # a hook's extras are part of the result
    done = wd / "results.json"
    try:
      if done.exists():
        res = json.loads(done.read_text())
        report.run_pictures(res, wd)  # a run of older code may lack them; a new run draws its own
      elif FLAGS.is_parsed() and "aggregate_only" in FLAGS and FLAGS.aggregate_only:
        records.append({**tags, "workdir": str(wd), "error": "not run yet"})
        continue
      else:
        res = train.train_and_evaluate(config, wd, on_task_end=on_task_end)
      records.append({**tags, "workdir": str(wd), "results": res})
    except Exception as e:  # noqa: BLE001  (a failed run must not stop the grid; its marker keeps the traceback)
      print(f"run FAILED {tags} in {wd}: {e}")
      runner.mark_failed(wd, traceback.format_exc(), config.seed)
      records.append({**tags, "workdir": str(wd), "error": str(e)})
  return records


def workdir_of(exp_dir: pathlib.Path, config, borrow: bool = True) -> pathlib.Path:
  """``runs/<dataset>_<method>_<config hash>`` of this experiment, or the finished twin of another one."""
  name = f"{config.dataset}_{config.method}_{config_lib.config_hash(config)}"
  return (borrow and finished_elsewhere(exp_dir, name)) or exp_dir / "runs" / name


def plan(name: str, scale: str, seeds: int, root: str, **grid) -> list:
  """The runs of one experiment without starting any: (tags, config, workdir, finished); configs validated."""
  exp_dir = pathlib.Path(root) / name / scale
  out = []
  for tags, config in GRIDS[name](scale, seeds, **_table1_only(name, grid)):
    config_lib.validate(config)
    wd = workdir_of(exp_dir, config, borrow=name != "table3")
    out.append((tags, config, wd, (wd / "results.json").exists()))
  return out


def finished_elsewhere(exp_dir: pathlib.Path, name: str) -> pathlib.Path | None:
  """The finished run of the same config (same hash) in any experiment of this scale, if one exists.

  Table 2's `onlycurrent` row is Table 1's SD at memory 500 and the embedding
  sweep's D=128 points are Table 1's memory-500 runs: each is trained once.
  """
  root, scale = exp_dir.parent.parent, exp_dir.name
  for done in sorted(root.glob(f"*/{scale}/runs/{name}/results.json")):
    return done.parent
  return None


def _metric(record, group, metric):
  res = record.get("results")
  return None if res is None else res["final"].get(metric)


def table1_rows(methods, memories, baselines=True):
  """(memory, method) rows: each memory's methods and baselines, then finetune without any memory."""
  rows = [(m, meth) for m in memories for meth in tuple(methods) + (BASELINES if baselines else ())]
  return rows + [(0, "finetune")] if baselines else rows


def srs_for(group: str, method: str) -> dict:
  """The published commands search R-MNIST's subset on onlypast for SD, onlycurrent for GM and SD+GM.

  configs/rmnist.py searches on onlycurrent for every method, as the paper's Table 1 states; the grid keeps
  the published commands, which its committed results were made with (the methods without a search keep
  onlypast too, unused, so that their config hashes are the committed runs').
  """
  if group != "rmnist":
    return {}
  return {"lasp.srs_data": "onlycurrent" if method in ("gm", "sd_gm") else "onlypast"}


def grid_table1(scale, seeds, methods=METHODS, memories=(200, 500), baselines=True):
  return [({"memory": m, "method": meth, "group": g, "seed": s},
           make_config(base, method=meth, seed=s, **{"memory.size": m}, **srs_for(g, meth)))
          for m, meth in table1_rows(methods, memories, baselines) for g, base in dataset_configs(scale).items()
          for s in range(seeds)]


def grid_table2(scale, seeds):
  groups = {k: v for k, v in dataset_configs(scale).items() if k in ("cifar10", "tiny")}
  return [({"srs": srs, "group": g, "seed": s},
           make_config(base, method="sd", seed=s, **{"memory.size": 500, "lasp.srs_data": srs}))
          for srs in SRS for g, base in groups.items() for s in range(seeds)]


def embedding_dims(scale):
  # tiny: the tiny config's own size, so that the smoke test shares its compiled programs with the other tests.
  return {"paper": (16, 32, 64, 128, 256, 512), "small": (16, 128), "tiny": (16,)}[scale]


def grid_embedding(scale, seeds):
  """The paper's figure: Co2L and SD, memory 500, per embedding size, SplitCIFAR10 and Tiny-ImageNet panels."""
  groups = {k: v for k, v in dataset_configs(scale).items() if k in ("cifar10", "tiny")}
  return [({"method": meth, "group": g, "dim": d, "seed": s},
           make_config(base, method=meth, seed=s, **{"model.embedding_dim": d, "memory.size": 500}))
          for g, base in groups.items() for meth in ("co2l", "sd") for d in embedding_dims(scale)
          for s in range(seeds)]


def grid_table3(scale, seeds):
  base = dataset_configs(scale)["cifar10"]
  return [({"seed": s}, make_config(base, method="co2l", seed=s, **{"eval.every_task": False}))
          for s in range(seeds)]


def table1(scale, seeds, out, methods=METHODS, memories=(200, 500), baselines=True):
  records = run_grid(out, grid_table1(scale, seeds, methods, memories, baselines))
  cols = [("cifar10", "class_il"), ("cifar10", "task_il"), ("tiny", "class_il"), ("tiny", "task_il"),
          ("rmnist", "domain_il")]
  names = column_names(scale)
  header = ["Memory", "Method"] + [f"{names[g]} {m}" for g, m in cols]
  rows = []
  for mem, meth in table1_rows(methods, memories, baselines):
    row = [mem, meth]
    for g, m in cols:
      vals = [_metric(r, g, m) for r in records if r["memory"] == mem and r["method"] == meth and r["group"] == g]
      paper = aggregate.PAPER_TABLE1.get((mem, meth), {}).get(f"{g}/{m}")
      row.append(aggregate.cell(aggregate.mean_std(vals), paper))
    rows.append(row)
  rows += raw_pixel_rows(records, cols, key=lambda r: r["memory"] if r["method"] == "joint" else None,
                         label=lambda mem: [mem, "raw pixels (linear)"])
  return header, rows, records


def raw_pixel_rows(records, cols, key, label) -> list:
  """One row per key value: the raw-pixel classifier of those runs (it depends only on the probe's data)."""
  rows = []
  for k in sorted({key(r) for r in records} - {None}):
    row = label(k)
    for g, m in cols:
      vals = [r["results"]["baselines"]["raw_pixels"].get(m) for r in records
              if key(r) == k and r["group"] == g and r.get("results", {}).get("baselines")]
      row.append(aggregate.cell(aggregate.mean_std(vals)))
    rows.append(row)
  return rows


def table2(scale, seeds, out):
  records = run_grid(out, grid_table2(scale, seeds))
  cols = [("cifar10", "class_il"), ("cifar10", "task_il"), ("tiny", "class_il"), ("tiny", "task_il")]
  names = column_names(scale)
  header = ["Setting"] + [f"{names[g]} {m}" for g, m in cols]
  rows = []
  for srs in SRS:
    row = [srs]
    for g, m in cols:
      vals = [_metric(r, g, m) for r in records if r["srs"] == srs and r["group"] == g]
      row.append(aggregate.cell(aggregate.mean_std(vals), aggregate.PAPER_TABLE2[srs].get(f"{g}/{m}")))
    rows.append(row)
  return header, rows, records


def embedding(scale, seeds, out):
  dims = embedding_dims(scale)
  records = run_grid(out, grid_embedding(scale, seeds))
  names = column_names(scale)
  header = ["Dataset", "Method"] + [f"D={d} class_il" for d in dims]
  rows = []
  for g in sorted({r["group"] for r in records}):
    series = {}
    for meth in ("co2l", "sd"):
      stats = [aggregate.mean_std([_metric(r, g, "class_il") for r in records
                                   if r["group"] == g and r["method"] == meth and r["dim"] == d]) for d in dims]
      series[meth] = stats
      rows.append([names[g], meth] + [aggregate.cell(s) for s in stats])
    plots.embedding_sweep(dims, series, out / ("embedding_sweep.png" if g == "cifar10" else f"embedding_sweep_{g}.png"),
                          title=names[g])
  return header, rows, records


# Random embedding subsets per boundary where not the paper's (subsets.NUM_SUBSETS): the tiny scale (smoke
# tests) 10, a tenth of the work (100 took ~6 s per call on the 2-core CPU, more than the tiny run itself).
TABLE3_SUBSETS = {"tiny": 10}


def table3(scale, seeds, out):
  n = TABLE3_SUBSETS.get(scale, subsets.NUM_SUBSETS)
  hook = lambda ctx, carry, t: ({"subsets": subsets.boundary_table(ctx, carry, t, n)}
                                if t < ctx.stream.num_tasks - 1 else {})
  records = run_grid(out, grid_table3(scale, seeds), on_task_end=hook)
  tasks = range(max(1, records[0]["results"]["num_tasks"] - 1) if records and "results" in records[0] else 4)
  header = [""] + [f"Task {t + 1}" for t in tasks]
  rows = []
  for label, part, stat in (("Mean subset accuracy on past tasks", "past", "mean"),
                            ("Mean subset accuracy on future tasks", "future", "mean"),
                            ("Std of subset accuracy on past tasks", "past", "std"),
                            ("Std of subset accuracy on future tasks", "future", "std")):
    row = [label]
    for t in tasks:
      vals = [e["subsets"][part][stat] for r in records if "results" in r for e in r["results"]["extra"]
              if e["task"] == t and "subsets" in e and part in e["subsets"]]
      paper = aggregate.PAPER_TABLE3[f"{part}_{stat}"]
      row.append(aggregate.cell(aggregate.mean_std(vals), paper[t] if t < len(paper) else None))
    rows.append(row)
  return header, rows, records


EXPERIMENTS = {"table1": table1, "table2": table2, "embedding": embedding, "table3": table3}
GRIDS = {"table1": grid_table1, "table2": grid_table2, "embedding": grid_embedding, "table3": grid_table3}


def _table1_only(name: str, grid: dict) -> dict:
  """--methods/--memories narrow Table 1's grid; the other experiments fix theirs."""
  return grid if name == "table1" else {}


def run_experiment(name: str, scale: str, seeds: int, root: str, **grid) -> pathlib.Path:
  """Runs one experiment's grid and writes its tables; ``grid`` narrows Table 1."""
  out = pathlib.Path(root) / name / scale
  out.mkdir(parents=True, exist_ok=True)
  header, rows, records = EXPERIMENTS[name](scale, seeds, out, **_table1_only(name, grid))
  failed = [r for r in records if "error" in r]
  note = f"\n\n{len(records) - len(failed)} runs, {len(failed)} failed; mean (sample std) over {seeds} seeds.\n"
  write_text_atomic(out / "table.md", f"# {name} ({scale})\n\n" + aggregate.markdown_table(header, rows) + note)
  write_text_atomic(out / "table.csv", aggregate.csv_table(header, rows))
  write_json_atomic(out / "runs.json", [{k: v for k, v in r.items() if k != "results"} |
                                        {"final": r.get("results", {}).get("final")} for r in records])
  print((out / "table.md").read_text())
  return out


def main(argv):
  logging.set_verbosity(logging.WARNING)  # Orbax logs every checkpoint at INFO
  xla_cache.enable(FLAGS.compile_cache)  # seeds and memory sizes share programs: compile once per grid
  names = list(EXPERIMENTS) if argv[1:] == ["all"] else argv[1:]
  unknown = [n for n in names if n not in EXPERIMENTS]
  if not names or unknown:
    raise app.UsageError(f"name one or more of {list(EXPERIMENTS)} or 'all' (unknown: {unknown})")
  memories = FLAGS.memories or (["500"] if FLAGS.scale == "small" else ["200", "500"])
  grid = dict(methods=tuple(FLAGS.methods), memories=tuple(int(m) for m in memories))
  for name in names:
    if FLAGS.dry_run:
      runs = plan(name, FLAGS.scale, FLAGS.seeds, FLAGS.results, **grid)
      for tags, _, wd, done in runs:
        print(f"{name} {'done   ' if done else 'pending'} {tags} {wd}")
      print(f"{name}: {len(runs)} runs, {sum(r[3] for r in runs)} finished, {len({r[2] for r in runs})} distinct")
      continue
    run_experiment(name, FLAGS.scale, FLAGS.seeds, FLAGS.results, **grid)


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
