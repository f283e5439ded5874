"""Task-boundary detection for streams that do not announce their tasks (``config.boundaries='detected'``).

The learner sees the stream one pass at a time (a shuffled pass over the data the stream serves now; the stream
may change only between passes). Before training a pass it looks at ``window`` samples of the data the pass
serves (a shuffle of the stream's new samples; the replay memory, which is the past, is left out) and a detector
decides whether a new task has begun. Detectors are pure functions of what the learner observed:

``novelty``: the samples hold a label never seen before (Class-IL: every task brings new classes).
``shift``: the mean embedding (eval mode, current model) of the incoming samples is far from that of the
previous pass's window, which the learner has just trained on, against the sampling noise of a mean
(Domain-IL: the classes repeat, but a new rotation moves every embedding). The statistic, :func:`mean_shift`,
is about 1 when nothing changed, whatever the batch size or embedding width.

:func:`scores` turns true and detected boundaries (global steps) into precision, recall and delay.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def label_novelty(*, labels: Sequence[int], seen: Sequence[int]) -> bool:
  """Whether ``labels`` hold a class outside ``seen``."""
  return bool(np.setdiff1d(np.asarray(labels), np.asarray(seen, np.int64)).size)


def mean_shift(a: np.ndarray, b: np.ndarray) -> float:
  """How far apart the mean features of two batches are, against their sampling noise: the squared difference
  of the means per feature over its pooled variance, averaged over the features that vary, times
  n_a n_b / (n_a + n_b). About 1 for two batches of one distribution; large when the distribution moved."""
  var = (a.var(axis=0) * len(a) + b.var(axis=0) * len(b)) / (len(a) + len(b))
  live = var > 1e-12
  if not live.any():
    return 0.0
  d2 = np.square(a.mean(axis=0) - b.mean(axis=0))[live] / var[live]
  return float(d2.mean() * len(a) * len(b) / (len(a) + len(b)))


def embedding_shift(*, value: float, threshold: float) -> bool:
  """Whether the incoming data's embeddings moved more than ``threshold`` times their sampling noise."""
  return value > threshold


def scores(true_steps: Sequence[int], windows: Sequence[int], detected_steps: Sequence[int]) -> dict:
  """Precision, recall and mean delay of detected boundaries.

  A detection at step d matches the true boundary b (each matched once, in order) when b <= d <= b + w, w the
  boundary's window (one epoch of the new task, in steps). Unmatched detections are false positives.
  """
  matched, delays, free = 0, [], sorted(detected_steps)
  for b, w in zip(true_steps, windows):
    hit = next((d for d in free if b <= d <= b + w), None)
    if hit is not None:
      free.remove(hit)
      matched += 1
      delays.append(hit - b)
  n_det, n_true = len(detected_steps), len(true_steps)
  return {"true": list(map(int, true_steps)), "detected": list(map(int, detected_steps)),
          "precision": matched / n_det if n_det else (1.0 if not n_true else 0.0),
          "recall": matched / n_true if n_true else 1.0,
          "mean_delay_steps": float(np.mean(delays)) if delays else None}
