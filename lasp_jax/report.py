"""Pictures of a run: ``acc_matrix.png``, ``curves.png`` in its workdir; ``comparison.png`` for ``--baselines``.

Each figure's footer names the run (dataset, method, seed), the commit and the date it was drawn, so a
copied PNG still says where it came from.
"""

from __future__ import annotations

import datetime
import pathlib

import numpy as np

from lasp_jax import config_lib, provenance
from lasp_jax.eval import health, metrics

# Panels of curves.png: (title, curve key, its degenerate reference or None, the health checks marked there).
_PANELS = (("SupCon (current-task anchors)", "supcon", "supcon_const",
            ("supcon_constant",)),
           ("IRD (unweighted)", "ird", "ird_uniform", ("ird_uniform", "mask_degenerate")),
           ("training loss", "loss", None, ("loss_not_falling", "grad_vanished")),
           ("learning rate (end of epoch)", "lr", None, ("lr_frozen",)),
           ("embedding variance / squared norm", "z_var", None, ("embedding_variance", "diverging")))
_REFERENCE_LABEL = {"supcon_const": "constant embedding", "ird_uniform": "uniform relations"}
# Curve keys that are no method's term: the epoch's place and figures drawn elsewhere or not at all.
_NOT_TERMS = {"task", "epoch", "grad_norm", "z_norm", *_REFERENCE_LABEL}


def curve_panels(curves: list) -> list[tuple]:
  """curves.png's panels for these curves, by the metric names they hold: the fixed panels whose quantity the run
  records (a cross-entropy run has no SupCon or IRD), then one panel of the method's other terms (e.g. DER++'s ce,
  logit_mse, replay_ce). Each (title, keys, reference key or None, health checks marked there)."""
  held = {k for c in curves for k, v in c.items() if v is not None}
  fixed = [(title, (key,), ref, checks) for title, key, ref, checks in _PANELS if key in held]
  drawn = {key for _, key, _, _ in _PANELS}
  terms = tuple(k for k in (curves[0] if curves else {}) if k in held and k not in drawn | _NOT_TERMS)
  title = "the method's terms" if len(terms) > 1 else (terms[0] if terms else "")
  return fixed + ([(title, terms, None, ())] if terms else [])


def _pyplot():
  import matplotlib  # noqa: PLC0415  (a run without pictures never loads matplotlib)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415  (a run without pictures never loads matplotlib)
  return plt


def _footer(fig, results: dict, what: str = "") -> None:
  prov = results.get("provenance")
  if prov is None:  # a seeds' mean: this process's provenance
    prov = provenance.provenance()
  commit = str(prov.get("git_commit") or "unknown")[:10] + (" (modified)" if prov.get("git_dirty") else "")
  machine = prov.get("cpu") if prov.get("platform") == "cpu" else prov.get("device_kind")
  what = what or f"{results.get('dataset')} {results.get('method')} seed {results.get('seed')}"
  fig.text(0.01, 0.005, f"{what} · {machine} · commit {commit} · drawn {datetime.date.today().isoformat()}",
           fontsize=6, color="grey")


def accuracy_matrices(results: dict, path) -> None:
  """One heat map per metric (Class-IL and Task-IL, or Domain-IL): rows = after task t, columns = task j."""
  plt = _pyplot()
  mats = results["acc_matrix"]
  fig, axes = plt.subplots(1, len(mats), figsize=(4.2 * len(mats), 3.8), squeeze=False)
  im = None
  for ax, (name, rows) in zip(axes[0], mats.items()):
    a = np.array([[np.nan if v is None else v for v in r] for r in rows], float)
    im = ax.imshow(a, vmin=0, vmax=100, cmap="viridis")
    if a.shape[0] <= 12:
      for (i, j), v in np.ndenumerate(a):
        if np.isfinite(v):
          ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color="w" if v < 60 else "k")
    final = results.get("final", {}).get(name)
    ax.set(title=f"{name}" + ("" if final is None else f" (final {final:.1f})"), xlabel="evaluated task j",
           ylabel="after training task t")
  fig.colorbar(im, ax=axes.ravel().tolist(), label="accuracy (%)")
  _footer(fig, results)
  fig.savefig(path, dpi=100)
  plt.close(fig)


def training_curves(results: dict, path) -> None:
  """Per-epoch SupCon and IRD beside their degenerate values (where the method has them), loss, learning rate,
  embedding variance and the method's other terms (``curve_panels``); task boundaries as grey lines, each health
  flag as a red x in the panel of the quantity it is about."""
  plt = _pyplot()
  curves = results["curves"]
  panels = curve_panels(curves)
  if not panels:  # no epoch recorded
    return
  fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.3), squeeze=False)
  x = np.arange(1, len(curves) + 1)
  position = {(c["task"], c["epoch"]): i + 1 for i, c in enumerate(curves)}
  last_of = {c["task"]: i + 1 for i, c in enumerate(curves)}
  flags = results.get("health", {}).get("flags", [])
  for ax, (title, keys, ref, checks) in zip(axes[0], panels):
    ys = [np.array([np.nan if c.get(key) is None else c[key] for c in curves], float) for key in keys]
    for key, y in zip(keys, ys):
      ax.plot(x, y, lw=1.2, label=key if len(keys) > 1 else None)
    y = ys[0]  # a flag marks the panel's first quantity
    if ref:
      ax.plot(x, [c.get(ref, np.nan) for c in curves], lw=0.8, ls=":", color="k", label=_REFERENCE_LABEL[ref])
    if ref or len(keys) > 1:
      ax.legend(fontsize=6)
    for t in last_of:
      if t > 0:
        ax.axvline(min(i for (tt, _), i in position.items() if tt == t) - 0.5, color="grey", lw=0.5)
    for f in flags:
      if f["check"] not in checks:
        continue
      i = position.get((f["task"], f["epoch"]), last_of.get(f["task"]))
      if i is not None and np.isfinite(y[i - 1]):
        ax.plot([i], [y[i - 1]], "x", color="red", ms=7)
    ax.set(title=title, xlabel="epoch (all tasks)")
  if flags:
    fig.suptitle(f"health flags (red x): {', '.join(sorted({f['check'] for f in flags}))}", color="red",
                 fontsize=9)
  _footer(fig, results)
  # Fixed margins, not tight_layout: its extra text-measuring pass was ~40 % of the picture's time.
  fig.subplots_adjust(left=0.045, right=0.99, bottom=0.17, top=0.84 if flags else 0.88, wspace=0.3)
  fig.savefig(path, dpi=100)
  plt.close(fig)


def comparison_chart(results: dict, path, what: str = "") -> None:
  """Final accuracy of each run (method and baselines) beside the raw-pixel classifier; flagged runs hatched,
  the seeds' std as error bars where ``results[name]`` is a seeds' mean (``final_std``)."""
  plt = _pyplot()
  names = list(results)
  first = results[names[0]]
  metrics = list(first["final"])
  pixels = first.get("baselines", {}).get("raw_pixels")
  rows = [(n, results[n]) for n in names] + ([("raw pixels", {"final": pixels})] if pixels else [])
  fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(rows) * len(metrics) / 2, 3.6))
  width = 0.8 / len(rows)
  for k, (name, res) in enumerate(rows):
    flagged = not res.get("health", {}).get("ok", True)
    vals = [res["final"][m] for m in metrics]
    err = [res["final_std"][m] for m in metrics] if "final_std" in res else None
    bars = ax.bar(np.arange(len(metrics)) + k * width, vals, width, yerr=err, capsize=3,
                  label=name + (" †" if flagged else ""), hatch="//" if flagged else None)
    ax.bar_label(bars, fmt="%.1f", fontsize=7)
  ax.set_xticks(np.arange(len(metrics)) + width * (len(rows) - 1) / 2, metrics)
  flagged_any = any(not res.get("health", {}).get("ok", True) for _, res in rows)
  ax.set(ylabel="final accuracy (%)", ylim=(0, 105),
         title="method and bounds" + (" († failed a health check)" if flagged_any else ""))
  ax.legend(fontsize=7, loc="lower right")
  _footer(fig, first, what)
  fig.tight_layout(rect=(0, 0.03, 1, 1))
  fig.savefig(path, dpi=100)
  plt.close(fig)


def run_pictures(results: dict, workdir) -> list[pathlib.Path]:
  """Writes acc_matrix.png and curves.png into ``workdir``; returns their paths."""
  wd = pathlib.Path(workdir)
  paths = [wd / "acc_matrix.png", wd / "curves.png"]
  accuracy_matrices(results, paths[0])
  training_curves(results, paths[1])
  return paths


# Wall-clock figures and where and when a results file was written (a run may resume on another day, machine or
# checkout): what may differ between two runs of the same work.
VOLATILE_KEYS = frozenset({"wall_time_s", "search_s", "eb_s", "timing", "train_s", "boundary_s", "probe_s",
                           "provenance"})


def without_volatile(obj):
  """results.json without its wall-clock figures and provenance: what two runs of the same work must share."""
  if isinstance(obj, dict):
    return {k: without_volatile(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
  if isinstance(obj, list):
    return [without_volatile(v) for v in obj]
  return obj


def results(config, stream, rs, *, wall_time_s: float) -> dict:
  """The results.json of a run from its state ``rs`` (run_state.RunState): accuracy matrices and their summaries,
  curves, boundaries, health, baselines, timing, provenance."""
  c, s = config, stream
  acc = {n: metrics.from_json_matrix(rows) for n, rows in rs.acc.items()}
  last = s.num_tasks - 1
  return {
      "dataset": c.dataset, "method": c.method, "scenario": s.scenario, "seed": c.seed,
      "num_tasks": s.num_tasks, "memory_size": c.memory.size, "embedding_dim": c.model.embedding_dim,
      "srs_data": c.lasp.srs_data, "config_hash": config_lib.config_hash(c),
      "acc_matrix": {n: metrics.to_json_matrix(a) for n, a in acc.items()},
      "final": {n: rs.overall[n][last] for n in acc},
      "avg_accuracy": {n: metrics.average_accuracy(a) for n, a in acc.items()},
      "forgetting": {n: metrics.forgetting(a) for n, a in acc.items()},
      "bwt": {n: metrics.backward_transfer(a) for n, a in acc.items()},
      "probe_epoch": rs.probe_epoch, "boundaries": rs.boundaries, "curves": rs.curves,
      "health": health.record(health.Flag(**f) for f in rs.health),
      "extra": rs.extra, "baselines": rs.baselines, "timing": rs.timing,
      "wall_time_s": round(wall_time_s, 2),
      "provenance": provenance.provenance(),
      **({} if s.given_boundaries else {"boundary_detection": s.detection_record(rs)}),
      **({"readouts": rs.readouts} if rs.readouts else {}),
      **({"validation": rs.validation} if rs.validation else {}),
  }


def summary(results: dict) -> str:
  """The compact end-of-run table: accuracy matrices and final figures."""
  lines = []
  for name, rows in results["acc_matrix"].items():
    lines.append(metrics.format_matrix(name, metrics.from_json_matrix(rows)))
  for name, v in results["final"].items():
    f, b = results["forgetting"][name], results["bwt"][name]
    lines.append(f"final {name}: {v:.2f}%  forgetting: {'-' if f is None else f'{f:.2f}'}  "
                 f"bwt: {'-' if b is None else f'{b:.2f}'}")
  for name, accs in results.get("baselines", {}).items():
    lines.append(f"baseline {name} (converged linear classifier on the final probe's data): " +
                 ", ".join(f"{m} {v:.2f}%" for m, v in accs.items()))
  h = results.get("health")
  if h is not None:
    lines.append("health: ok (every task trained)" if h["ok"] else
                 f"health: FLAGGED ({', '.join(h['checks'])}; {len(h['flags'])} flags in results.json)")
  lines.append(f"wall time of this run: {results['wall_time_s']:.1f} s")
  return "\n".join(lines)


def tensorboard_writer(workdir):
  """A TensorBoard writer into ``workdir/tensorboard`` (None without tensorboardX)."""
  try:
    from tensorboardX import SummaryWriter  # noqa: PLC0415  (optional: a run without it writes no event files)
  except ImportError:
    return None
  return SummaryWriter(str(pathlib.Path(workdir) / "tensorboard"))
