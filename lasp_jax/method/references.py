"""The contrastive family's degenerate reference values, exact for the batches a run draws (numpy only).

* SupCon of a constant embedding: every logit is equal, so each current anchor
  scores ``(tau / base_tau) * log(2n - 1)`` for a batch of n valid samples, and
  the mean over all 2n anchors weighs it by the share of current samples.
* IRD with uniform relations: the cross-entropy of any distribution against the
  uniform one over the 2n - 1 other rows is ``log(2n - 1)``.

A task whose SupCon or IRD settles on one of them did not train (eval/health.py).
"""

from __future__ import annotations

import math

import numpy as np


def supcon_constant_value(*, num_valid, num_current, temperature: float, base_temperature: float) -> float:
  """SupCon of a constant embedding, averaged over steps weighted by their valid samples.

  Args:
    num_valid: (steps,) valid samples per step (n; 2n rows).
    num_current: (steps,) valid current-task samples per step.
  """
  n = np.asarray(num_valid, np.float64)
  c = np.asarray(num_current, np.float64)
  keep = n > 1
  per_step = (temperature / base_temperature) * np.log(2 * n[keep] - 1) * c[keep] / n[keep]
  return float(np.average(per_step, weights=n[keep])) if keep.any() else math.nan


def ird_uniform_value(*, num_valid) -> float:
  """IRD when the current model's relations are uniform, averaged over steps weighted by their valid samples."""
  n = np.asarray(num_valid, np.float64)
  keep = n > 1
  return float(np.average(np.log(2 * n[keep] - 1), weights=n[keep])) if keep.any() else math.nan


def reference_values(chunks, *, temperature: float, base_temperature: float) -> dict:
  """An epoch's degenerate reference values from its batches (each with (steps, B) ``valid``/``is_current``)."""
  n = np.concatenate([np.asarray(b.valid).sum(-1) for b in chunks])  # a tail chunk may be narrower
  current = np.concatenate([(np.asarray(b.is_current) & np.asarray(b.valid)).sum(-1) for b in chunks])
  return {"supcon_const": supcon_constant_value(num_valid=n, num_current=current, temperature=temperature,
                                                base_temperature=base_temperature),
          "ird_uniform": ird_uniform_value(num_valid=n)}
