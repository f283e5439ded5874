"""PNG plots: accuracy-matrix heat maps, training curves, the embedding-size sweep."""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np


def run_plots(results: dict, workdir) -> None:
  """Heat map of every accuracy matrix and the per-epoch loss / IRD curves of one run."""
  wd = pathlib.Path(workdir)
  mats = results["acc_matrix"]
  fig, axes = plt.subplots(1, len(mats), figsize=(4.2 * len(mats), 3.6), squeeze=False)
  for ax, (name, rows) in zip(axes[0], mats.items()):
    a = np.array([[np.nan if v is None else v for v in r] for r in rows], float)
    im = ax.imshow(a, vmin=0, vmax=100, cmap="viridis")
    for (i, j), v in np.ndenumerate(a):
      if np.isfinite(v):
        ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color="w" if v < 60 else "k")
    ax.set(title=name, xlabel="evaluated task j", ylabel="after training task t")
  fig.colorbar(im, ax=axes.ravel().tolist())
  fig.savefig(wd / "acc_matrix.png", dpi=100)
  plt.close(fig)
  curves = results["curves"]
  fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
  x = np.arange(len(curves))
  ax[0].plot(x, [c["loss"] for c in curves], label="total")
  ax[0].plot(x, [c["supcon"] for c in curves], label="SupCon")
  ax[1].plot(x, [c["ird"] for c in curves], color="C2")
  for t in sorted({c["task"] for c in curves})[1:]:
    start = next(i for i, c in enumerate(curves) if c["task"] == t)
    for a in ax:
      a.axvline(start, color="grey", lw=0.5)
  ax[0].set(title="loss per epoch", xlabel="epoch (all tasks)")
  ax[0].legend()
  ax[1].set(title="IRD (unscaled)", xlabel="epoch (all tasks)")
  fig.tight_layout()
  fig.savefig(wd / "curves.png", dpi=100)
  plt.close(fig)


def embedding_sweep(dims, series: dict, path, title: str = "") -> None:
  """Mean +- std of final Class-IL accuracy against the embedding size, one line per method."""
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for name, stats in series.items():
    m = np.array([np.nan if s[0] is None else s[0] for s in stats])
    sd = np.array([np.nan if s[1] is None else s[1] for s in stats])
    ax.plot(dims, m, marker="o", label=name)
    ax.fill_between(dims, m - sd, m + sd, alpha=0.25)
  ax.set_xscale("log", base=2)
  ax.set(xlabel="embedding size D", ylabel="final Class-IL accuracy (%)", title=title)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
