"""Continual-learning summary metrics over the accuracy matrix.

``A[t][j]`` is the accuracy (percent) on task j's test set after training task t;
entries with j > t are not measured (NaN). With T the last evaluated row:

* average accuracy  = mean_{j <= T} A[T][j]
* forgetting        = mean_{j < T} ( max_{t in [j, T-1]} A[t][j] - A[T][j] )
* backward transfer = mean_{j < T} ( A[T][j] - A[j][j] )

Forgetting and BWT need every row; with a last-task-only evaluation they are None.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

import numpy as np


def _rows_complete(a: np.ndarray) -> bool:
  return all(np.all(np.isfinite(a[t, :t + 1])) for t in range(a.shape[0]))


def average_accuracy(a: np.ndarray) -> float:
  last = a[-1]
  # NaN when the last task has no probe yet (a run stopped before it): no mean of an empty slice.
  return float(np.nanmean(last)) if np.isfinite(last).any() else math.nan


def forgetting(a: np.ndarray):
  a = np.asarray(a, float)
  t = a.shape[0] - 1
  if t == 0 or not _rows_complete(a):
    return None
  return float(np.mean([np.max(a[j:t, j]) - a[t, j] for j in range(t)]))


def backward_transfer(a: np.ndarray):
  a = np.asarray(a, float)
  t = a.shape[0] - 1
  if t == 0 or not _rows_complete(a):
    return None
  return float(np.mean([a[t, j] - a[j, j] for j in range(t)]))


def to_json_matrix(a: np.ndarray):
  """NaN -> None so the matrix is valid JSON."""
  return [[None if not math.isfinite(v) else round(float(v), 4) for v in row] for row in np.asarray(a, float)]


def from_json_matrix(rows) -> np.ndarray:
  return np.array([[np.nan if v is None else v for v in row] for row in rows], float)


def format_matrix(name: str, a: np.ndarray) -> str:
  """A compact text table of the accuracy matrix: only the rows that were measured (a probe after the last
  task only prints one row)."""
  a = np.asarray(a, float)
  head = f"{name:>10} " + " ".join(f"T{j:<5d}" for j in range(a.shape[1]))
  lines = [head]
  for t, row in enumerate(a):
    if not np.isfinite(row).any():
      continue
    lines.append(f"{'after T' + str(t):>10} " + " ".join("  -   " if not np.isfinite(v) else f"{v:6.2f}" for v in row))
  return "\n".join(lines)


def mean_std(values: Iterable[Optional[float]]):
  """(mean, sample std with ddof=1, n) over the finite values; std is 0 for n = 1."""
  v = np.array([x for x in values if x is not None and math.isfinite(x)], float)
  if v.size == 0:
    return None, None, 0
  return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def seeds_cell(ms) -> str:
  """'mean (std)' over seeds; one seed's value alone (no spread to show)."""
  return f"{ms[0]:.2f}" if ms[2] == 1 else cell(ms)


def cell(ms, paper=None) -> str:
  """'mean (std)' plus the paper's value and our difference when given."""
  mean, std, n = ms
  if mean is None:
    return "–"
  text = f"{mean:.2f} ({std:.2f})"
  if paper is not None:
    text += f" [paper {paper[0]:.2f}; Δ {mean - paper[0]:+.2f}]"
  return text


def t_quantile(dof: int, level: float = 0.95) -> float:
  """The two-sided ``level`` quantile of Student's t with ``dof`` degrees of freedom (scipy, which jax needs)."""
  from scipy import stats  # noqa: PLC0415  (only the tables use it)
  return float(stats.t.ppf(0.5 + level / 2, dof))


def paired_interval(diffs: Iterable[Optional[float]], level: float = 0.95):
  """(mean, half-width, n) of the ``level`` confidence interval of the mean paired difference, t with n - 1
  degrees of freedom over the finite values; half-width None for n < 2."""
  mean, std, n = mean_std(diffs)
  if n < 2:
    return mean, None, n
  return mean, t_quantile(n - 1, level) * std / math.sqrt(n), n


def interval_verdict(mean: Optional[float], half: Optional[float]) -> str:
  """What the interval says: the sign when it excludes 0, else that no difference was detected at its width."""
  if mean is None or half is None:
    return "too few pairs"
  if abs(mean) > half:
    return "above (interval excludes 0)" if mean > 0 else "below (interval excludes 0)"
  return f"no difference detected (±{half:.2f})"


def interval_cell(diffs, level: float = 0.95) -> tuple[int, str, str]:
  """(pairs, 'mean [lo, hi]', verdict) of paired differences, for a table row."""
  mean, half, n = paired_interval(diffs, level)
  if mean is None:
    return 0, "–", "too few pairs"
  text = f"{mean:+.2f}" if half is None else f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}]"
  return n, text, interval_verdict(mean, half)


def paired_p(diffs: Iterable[Optional[float]]) -> Optional[float]:
  """Two-sided p of the paired t test (mean 0) over the finite differences; None for n < 2 or no spread."""
  mean, std, n = mean_std(diffs)
  if n < 2 or not std:
    return None
  from scipy import stats  # noqa: PLC0415  (only the tables use it)
  return float(2 * stats.t.sf(abs(mean) / (std / math.sqrt(n)), n - 1))


def p_cell(p: Optional[float]) -> str:
  """A p-value as a table shows it."""
  return "–" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def holm(pvalues: list[Optional[float]]) -> list[Optional[float]]:
  """Holm's step-down adjusted p-values over a family of tests (None entries are not tests): the k-th smallest of m
  p-values times (m - k + 1), made non-decreasing, at most 1."""
  tests = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
  out, running = [None] * len(pvalues), 0.0
  for k, (p, i) in enumerate(tests):
    running = max(running, min(1.0, (len(tests) - k) * p))
    out[i] = running
  return out


def detectable_effect(std: Optional[float], n: int, power: float = 0.8, level: float = 0.95) -> Optional[float]:
  """The smallest true mean difference a paired t test of n pairs with this spread detects (two-sided, ``level``)
  with probability ``power``: (t_(1 - alpha/2, n-1) + t_(power, n-1)) x std / sqrt(n), the usual t approximation."""
  if n < 2 or std is None:
    return None
  from scipy import stats  # noqa: PLC0415  (only the tables use it)
  return float((stats.t.ppf(0.5 + level / 2, n - 1) + stats.t.ppf(power, n - 1)) * std / math.sqrt(n))


def effect_cell(diffs) -> str:
  """The smallest true difference ``diffs``' paired test detects at 80 % power, as a table shows it."""
  _, std, n = mean_std(diffs)
  effect = detectable_effect(std, n)
  return "–" if effect is None else f"{effect:.2f}"


def welch(a: tuple, b: tuple) -> tuple[float, float, float]:
  """(t, degrees of freedom, two-sided p) of Welch's test from two groups' (mean, std, n): what two published
  means with their spreads say of their difference."""
  from scipy import stats  # noqa: PLC0415  (only the tables use it)
  se, dof = _welch_se_dof(a, b)
  t = (a[0] - b[0]) / se
  return t, dof, float(2 * stats.t.sf(abs(t), dof))


def welch_interval(a: tuple, b: tuple, level: float = 0.95) -> tuple[float, float, float]:
  """(mean a − mean b, half-width of its ``level`` interval, two-sided p) of two unpaired groups' (mean, std, n),
  Welch's degrees of freedom: two sides whose seeds draw different weights and orders."""
  _, dof, p = welch(a, b)
  return a[0] - b[0], t_quantile(dof, level) * _welch_se_dof(a, b)[0], p


def _welch_se_dof(a: tuple, b: tuple) -> tuple[float, float]:
  """The standard error of mean a − mean b and Welch–Satterthwaite's degrees of freedom."""
  (_, s1, n1), (_, s2, n2) = a, b
  v1, v2 = s1 * s1 / n1, s2 * s2 / n2
  return math.sqrt(v1 + v2), (v1 + v2) ** 2 / (v1 * v1 / (n1 - 1) + v2 * v2 / (n2 - 1))
