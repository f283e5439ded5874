"""The embedding-size sweep figure (a run's own pictures: lasp_jax/report.py)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the setting above)
import numpy as np


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
