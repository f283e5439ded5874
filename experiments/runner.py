"""One cell of an experiment grid: run it unless it has finished, mark a failure atomically, keep what a table needs.

Every experiment under ``experiments/`` runs its cells through :func:`run_or_skip`: a cell whose workdir holds
``results.json`` (finished) or ``FAILED.json`` (stopped on a non-finite loss) is read back, not rerun; anything
else resumes from its checkpoints. A failed cell's marker carries the error, the seed and the provenance; it
is written atomically, so an interrupted write leaves no half marker. Delete the marker to retry the cell.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Callable, Optional

from lasp_jax import provenance, train
from lasp_jax.errors import TrainingError
from lasp_jax.loop.checkpoint import write_json_atomic

RESULTS, FAILED = "results.json", "FAILED.json"
# What a finished cell keeps: results.json has every figure; checkpoints and event files are large.
BULKY = ("checkpoints", "tensorboard")


def outcome(workdir) -> Optional[dict]:
  """The cell's results, its failure marker (``{"failed": error, ...}``), or None when it has not ended."""
  for name in (RESULTS, FAILED):
    path = pathlib.Path(workdir) / name
    if path.exists():
      return json.loads(path.read_text())
  return None


def run_or_skip(workdir, config, on_task_end: Optional[Callable] = None, keep_bulky: bool = False) -> dict:
  """The cell's results: read back if it ended, else trained (resuming if it started) and then read.

  A run that stops on a non-finite loss (``TrainingError``) becomes ``FAILED.json`` and its result
  ``{"failed": error, "seed": ..., "provenance": ...}``; other errors propagate (a bug is not a result).
  """
  workdir = pathlib.Path(workdir)
  done = outcome(workdir)
  if done is not None:
    return done
  try:
    res = train.train_and_evaluate(config, workdir, on_task_end=on_task_end)
  except TrainingError as e:
    res = mark_failed(workdir, str(e), config.seed)
  if not keep_bulky:
    for sub in BULKY:
      shutil.rmtree(workdir / sub, ignore_errors=True)
  return res


def mark_failed(workdir, error: str, seed: int) -> dict:
  """Writes the cell's failure marker (atomically) and returns it."""
  res = {"failed": error, "seed": seed, "provenance": provenance.provenance()}
  pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
  write_json_atomic(pathlib.Path(workdir) / FAILED, res)
  return res


def failed(res: dict) -> bool:
  return "failed" in res
