"""FINDINGS.md's figure: every paired difference the verdict rests on, with its 95 % t interval.

    python -m experiments.findings        # results/findings/intervals.png and intervals.md from the shipped runs

Left: SD − Co2L (and SD − finetune, Co2L − finetune) at every equal-heads point on the centred head, at
results/lasp_gain's one point with all 60,000 digits per domain (published head), and results/threats' answers to
the verdict's threats (each method at the lambda its validation split chose, memory 500, the paper's steps per
domain on both heads); then the paper-scale pair on the centred head (results/rmnist_paper, one H200). Right: what
each change does to SD at 600 digits per domain (the ablation). Every CPU run is read out by the converged L-BFGS
classifier, the paper-scale runs by the published SGD probe (their label says so).
"""

from __future__ import annotations

import datetime
import json
import pathlib

from absl import flags

from experiments import aggregate, gpu_queue, studies, threats
from lasp_jax import errors
from lasp_jax.loop.checkpoint import write_text_atomic

FLAGS = flags.FLAGS
REPO = pathlib.Path(__file__).resolve().parents[1]

# (label, point, head, method, other): the verdict's comparisons, in the figure's order (top first).
MAIN = [(f"{p}: SD − Co2L", p, "centred", "SD onlycurrent", "Co2L") for p in ("d600", "d1200", "d2500")] + [
    (f"{p}: SD (onlypast) − Co2L", p, "centred", "SD onlypast", "Co2L") for p in ("d600", "d1200", "d2500")] + [
    (f"{p}: SD − finetune", p, "centred", "SD onlycurrent", "finetune") for p in ("d600", "d1200", "d2500")] + [
    (f"{p}: Co2L − finetune", p, "centred", "Co2L", "finetune") for p in ("d600", "d1200", "d2500")] + [
    (f"{p} (Split): SD − Co2L", p, "centred", "SD onlycurrent", "Co2L") for p in ("c1", "c2")]
ABLATION = [("SD at λ 1 − SD", "SD lambda1"), ("random subset − SD", "SD random subset"),
            ("all dims − SD", "SD all dims"), ("searched on memory + batch − SD", "SD combined"),
            ("searched on memory − SD", "SD onlypast")]


def study_rows(name: str) -> list[dict]:
  """Every run's row of a study, as its ``--aggregate_only`` wrote them (results/NAME/runs.json)."""
  runs = json.loads((REPO / "results" / name / "runs.json").read_text())
  return runs["rows"] if isinstance(runs, dict) else runs  # results/threats keeps its choice of lambda beside


def intervals() -> list[tuple[str, str, list[float]]]:
  """(panel, label, paired differences) of every comparison drawn."""
  eh = study_rows("equal_heads")
  out = [("main", label, studies.paired(eh, p, h, m, other=o)) for label, p, h, m, o in MAIN]
  out.append(("main", "p5 (60,000 digits, published head): SD (onlypast) − Co2L",
              studies.gains(study_rows("lasp_gain"), "p5", "SD onlypast", "m1")))
  out += threat_intervals()
  pairs = gpu_queue.sd_co2l_pairs(gpu_queue.finished_cells(REPO / "results" / "rmnist_paper")).get(
      (200, "centred", None), {})
  out.append(("main", "paper scale (H200, 20 × 60,000, centred, SGD probe): SD (onlypast) − Co2L",
              [sd["final"]["domain_il"] - co2l["final"]["domain_il"] for sd, co2l in pairs.values()]))
  out += [("ablation", label, studies.paired(eh, "d600", "centred", m, other="SD onlycurrent"))
          for label, m in ABLATION]
  return out


def threat_intervals() -> list[tuple[str, str, list[float]]]:
  """results/threats' SD − Co2L comparisons (test L-BFGS), the tuned pair at the lambda each method's validation
  split chose."""
  runs = json.loads((REPO / "results" / "threats" / "runs.json").read_text())
  chosen = {m: threats.lam(c["lambda"]) for m, c in runs.get("chosen", {}).items()}
  comparisons = [("d600, memory 500: SD − Co2L", "memory500", "SD lambda5", "Co2L lambda1", "centred")]
  if {"SD", "Co2L"} <= set(chosen):
    comparisons.insert(0, (f"d2500, each at its chosen λ (SD {chosen['SD']}, Co2L {chosen['Co2L']}): SD − Co2L",
                           "tuned", f"SD lambda{chosen['SD']}", f"Co2L lambda{chosen['Co2L']}", "centred"))
  comparisons += [(f"paper steps (5 × 59,000 digits, {head}): SD (onlypast) − Co2L", "paper_steps", "SD onlypast",
                   "Co2L", head) for head in ("centred", "published")]
  comparisons.append(("paper steps, memory 500 (centred): SD (onlypast) − Co2L", "memory500_steps", "SD onlypast",
                      "Co2L", "centred"))
  pairs = [("main", label, threats.paired(runs["rows"], grid, a, b, "m1", head, head))
           for label, grid, a, b, head in comparisons]
  return [row for row in pairs if row[2]]  # a grid not yet run draws no row


# The paper's Table 1, R-MNIST, memory 200 (mean, std, runs): SD's own runs and Co2L's figure copied from its paper.
PAPER_GAP = ((98.80, 0.26, 5), (97.90, 1.92, 5))


def table(rows) -> str:
  from lasp_jax.eval import metrics  # noqa: PLC0415  (scipy, for the p-values)
  ps = [metrics.paired_p(d) for _, _, d in rows]
  adjusted = metrics.holm(ps)
  body = []
  for (panel, label, d), p, adj in zip(rows, ps, adjusted):
    body.append([panel, label, *aggregate.interval_cell(d), aggregate.p_cell(p), aggregate.p_cell(adj),
                 aggregate.effect_cell(d)])
  t, dof, p_paper = metrics.welch(*PAPER_GAP)
  return "\n".join(["# The verdict's paired differences", "",
                    "Produced by `python -m experiments.findings`. Per-angle Domain-IL (Rotated MNIST) or Class-IL",
                    "(Split-MNIST) points, paired by seed, mean with its 95 % t interval (n − 1 degrees of freedom);",
                    f"p of the paired t test, Holm-adjusted over the {sum(x is not None for x in ps)} tests of this",
                    "table; the smallest true difference each could detect (two-sided 5 %, 80 % power).", "",
                    aggregate.markdown_table(["panel", "difference", "pairs", "mean [95 % interval]", "verdict", "p",
                                              "Holm p", "detectable (80 %)"], body), "",
                    f"The paper's own gap (Table 1, R-MNIST, memory 200): SD 98.80 (0.26), 5 runs (its caption), "
                    f"against Co2L 97.90 (1.92), copied from the Co2L paper with no run count (taken as 5): Welch t "
                    f"{t:.2f}, {dof:.1f} degrees of freedom, p {p_paper:.2f}.", ""])


# The figure's readings of a comparison: (panel, read-out) -> (the study rows' metric, the paper-scale pair's).
READINGS = {("per-angle", "L-BFGS"): "m1", ("per-angle", "SGD probe"): "sgd", ("last-angle", "L-BFGS"): "m2",
            ("last-angle", "SGD probe"): "sgd_last"}


def readings() -> list[tuple[str, str, dict]]:
  """(block, label, {(panel, read-out): paired differences}) of every SD − Co2L comparison, then the bounds
  (method − finetune) apart: what the figure draws, both metrics by both read-outs where the runs have them."""
  eh, th = study_rows("equal_heads"), json.loads((REPO / "results" / "threats" / "runs.json").read_text())
  out = []
  for label, p, h, m, o in MAIN:
    block = "bounds" if o == "finetune" else "SD − Co2L"
    out.append((block, label, {k: studies.paired(eh, p, h, m, other=o, metric=v) for k, v in READINGS.items()
                               if v in ("m1", "m2")}))
  gain = study_rows("lasp_gain")
  out.append(("SD − Co2L", "p5 (60,000 digits, published head), SD (onlypast)",
              {(panel, "L-BFGS"): studies.gains(gain, "p5", "SD onlypast", v)
               for (panel, readout), v in READINGS.items() if readout == "L-BFGS"}))
  chosen = {m: threats.lam(c["lambda"]) for m, c in th.get("chosen", {}).items()}
  comparisons = [("d600, memory 500", "memory500", "SD lambda5", "Co2L lambda1", "centred")]
  if {"SD", "Co2L"} <= set(chosen):
    comparisons.insert(0, (f"d2500, each at its chosen λ (SD {chosen['SD']}, Co2L {chosen['Co2L']})", "tuned",
                           f"SD lambda{chosen['SD']}", f"Co2L lambda{chosen['Co2L']}", "centred"))
  comparisons += [(f"paper steps ({head})", "paper_steps", "SD onlypast", "Co2L", head)
                  for head in ("centred", "published")]
  comparisons.append(("paper steps, memory 500", "memory500_steps", "SD onlypast", "Co2L", "centred"))
  for label, grid, a, b, head in comparisons:
    got = {k: threats.paired(th["rows"], grid, a, b, v, head, head) for k, v in READINGS.items()}
    if any(got.values()):
      out.append(("SD − Co2L", label, got))
  pairs = gpu_queue.sd_co2l_pairs(gpu_queue.finished_cells(REPO / "results" / "rmnist_paper")).get(
      (200, "centred", None), {})
  last = lambda r: r["acc_matrix"]["domain_il"][-1][-1]
  out.append(("SD − Co2L", "paper scale (H200, centred)", {
      ("per-angle", "SGD probe"): [sd["final"]["domain_il"] - co["final"]["domain_il"] for sd, co in pairs.values()],
      ("last-angle", "SGD probe"): [last(sd) - last(co) for sd, co in pairs.values()]}))
  return sorted(out, key=lambda r: r[0] == "bounds")  # the bounds apart, below


def figure(path: pathlib.Path) -> None:
  import matplotlib  # noqa: PLC0415  (matplotlib only when drawing)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415  (matplotlib only when drawing)

  from lasp_jax import provenance  # noqa: PLC0415
  from lasp_jax.eval import metrics  # noqa: PLC0415
  rows = readings()
  gap = PAPER_GAP[0][0] - PAPER_GAP[1][0]
  fig, axes = plt.subplots(1, 2, figsize=(15, 1.8 + 0.36 * len(rows)), sharey=True)
  style = {"L-BFGS": dict(fmt="o", color="C0", dy=0.15), "SGD probe": dict(fmt="s", color="C1", dy=-0.15)}
  for ax, panel in zip(axes, ("per-angle", "last-angle")):
    for y, (_, _, got) in enumerate(reversed(rows)):
      for readout, st in style.items():
        mean, half, n = metrics.paired_interval(got.get((panel, readout), []))
        if mean is None:
          continue
        ax.errorbar(mean, y + st["dy"], xerr=[[half or 0], [half or 0]], fmt=st["fmt"], color=st["color"],
                    capsize=2, ms=4, label=readout if y == 0 or not ax.get_legend_handles_labels()[1].count(readout)
                    else None)
        ax.annotate(f"n={n}", (mean, y + st["dy"]), textcoords="offset points", xytext=(5, 1), fontsize=6)
    bounds = sum(b == "bounds" for b, _, _ in rows)
    ax.axhline(bounds - 0.5, color="grey", lw=0.8, ls=":")
    ax.axvline(0, color="grey", lw=1)
    ax.axvline(gap, color="C2", lw=1, ls="--", label=f"the paper's SD − Co2L (+{gap:.1f})")
    ax.set_yticks(range(len(rows)), [label for _, label, _ in reversed(rows)], fontsize=7)
    ax.set(xlabel="paired difference, accuracy points (mean, 95 % t interval)",
           title=f"{panel} (Domain-IL; Split-MNIST rows: Class-IL)")
    ax.title.set_fontsize(9)
    handles, labels = ax.get_legend_handles_labels()
    keep = dict(zip(labels, handles))
    ax.legend(keep.values(), keep.keys(), fontsize=7, loc="lower left")
  axes[0].text(0.99, 0.01, "below the dotted line: each method − finetune (the bounds)", transform=axes[0].transAxes,
               ha="right", va="bottom", fontsize=6.5, color="grey")
  cpus = lambda name: "; ".join(sorted({r["cpu"].split(" (")[0] for r in study_rows(name) if r.get("cpu")}))
  fig.text(0.01, 0.005, f"python -m experiments.findings · results/equal_heads (2-core {cpus('equal_heads')}), "
                        f"results/threats (2-core {cpus('threats')}), results/lasp_gain, results/rmnist_paper (one "
                        f"H200) · drawn {datetime.date.today().isoformat()} at "
                        f"{provenance.provenance().get('git_commit', '?')[:7]}", fontsize=6, color="grey")
  fig.tight_layout(rect=(0, 0.03, 1, 1))
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)


def main(argv):
  del argv
  out = pathlib.Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  rows = intervals()
  write_text_atomic(out / "intervals.md", table(rows))
  figure(out / "intervals.png")
  print(f"table: {out / 'intervals.md'}\nfigure: {out / 'intervals.png'}")


if __name__ == "__main__":
  flags.DEFINE_string("out", "results/findings", "Output folder.")
  errors.run_app(main)
