"""FINDINGS.md's figure: every paired difference the verdict rests on, with its 95 % t interval.

    python -m experiments.findings        # results/findings/intervals.png and intervals.md from the shipped runs

Left: SD − Co2L (and SD − finetune, Co2L − finetune) at every equal-heads point on the centred head, and at
results/lasp_gain's one point with all 60,000 digits per domain (published head). Right: what each change does
to SD at 600 digits per domain (the ablation). Every run is read out by the converged L-BFGS classifier.
"""

from __future__ import annotations

import datetime
import json
import pathlib

from absl import flags

from experiments import aggregate, studies
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
  return json.loads((REPO / "results" / name / "runs.json").read_text())


def intervals() -> list[tuple[str, str, list[float]]]:
  """(panel, label, paired differences) of every comparison drawn."""
  eh = study_rows("equal_heads")
  out = [("main", label, studies.paired(eh, p, h, m, other=o)) for label, p, h, m, o in MAIN]
  out.append(("main", "p5 (60,000 digits, published head): SD (onlypast) − Co2L",
              studies.gains(study_rows("lasp_gain"), "p5", "SD onlypast", "m1")))
  out += [("ablation", label, studies.paired(eh, "d600", "centred", m, other="SD onlycurrent"))
          for label, m in ABLATION]
  return out


def table(rows) -> str:
  body = [[panel, label, *aggregate.interval_cell(d)] for panel, label, d in rows]
  return "\n".join(["# The verdict's paired differences", "",
                    "Produced by `python -m experiments.findings`. Per-angle Domain-IL (Rotated MNIST) or Class-IL",
                    "(Split-MNIST) points, paired by seed, mean with its 95 % t interval (n − 1 degrees of freedom).",
                    "", aggregate.markdown_table(["panel", "difference", "pairs", "mean [95 % interval]", "verdict"],
                                                 body), ""])


def figure(rows, path: pathlib.Path) -> None:
  import matplotlib  # noqa: PLC0415  (matplotlib only when drawing)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415  (matplotlib only when drawing)

  from lasp_jax import provenance  # noqa: PLC0415
  from lasp_jax.eval import metrics  # noqa: PLC0415
  eh = study_rows("equal_heads")
  cpus = "; ".join(sorted({r["cpu"].split(" (")[0] for r in eh if r.get("cpu")}))
  fig, axes = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [3, 2]})
  for ax, panel, title in ((axes[0], "main", "SD against Co2L and finetune (centred head unless named)"),
                           (axes[1], "ablation", "Each change to SD (d600, centred head)")):
    mine = [(label, d) for p, label, d in rows if p == panel]
    for y, (_, d) in enumerate(reversed(mine)):
      mean, half, n = metrics.paired_interval(d)
      if mean is None:
        continue
      excl = half is not None and abs(mean) > half
      ax.errorbar(mean, y, xerr=[[half or 0], [half or 0]], fmt="o", color="C3" if excl and mean < 0 else
                  "C2" if excl else "C0", capsize=3)
      ax.annotate(f"n={n}", (mean, y), textcoords="offset points", xytext=(6, 4), fontsize=6.5)
    ax.axvline(0, color="grey", lw=1)
    ax.set_yticks(range(len(mine)), [label for label, _ in reversed(mine)], fontsize=7)
    ax.set(xlabel="paired difference, accuracy points (mean, 95 % t interval)", title=title)
    ax.title.set_fontsize(9)
  fig.text(0.01, 0.005, f"python -m experiments.findings · runs of results/equal_heads (2-core {cpus}) and "
                        "results/lasp_gain (2-core AMD EPYC Zen 5), L-BFGS read-out · red: interval below 0, green: "
                        f"above, blue: includes 0 · drawn {datetime.date.today().isoformat()} at "
                        f"{provenance.provenance().get('git_commit', '?')[:7]}", fontsize=6, color="grey")
  fig.tight_layout(rect=(0, 0.03, 1, 1))
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv):
  del argv
  out = pathlib.Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  rows = intervals()
  write_text_atomic(out / "intervals.md", table(rows))
  figure(rows, out / "intervals.png")
  print(f"table: {out / 'intervals.md'}\nfigure: {out / 'intervals.png'}")


if __name__ == "__main__":
  flags.DEFINE_string("out", "results/findings", "Output folder.")
  errors.run_app(main)
