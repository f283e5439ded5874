"""The baselines run beside a method (``main --baselines``) and the comparison table they make.

The method's family's bounds: for the contrastive family finetune (the same SupCon training on each task alone,
no replay, no distillation: the lower bound; its probe gets the same memory as the method's, so the two
representations are read out on the same data) and joint (every task so far at once, same step budget: the upper
bound); for the cross-entropy family ce_finetune and ce_joint, likewise. Raw pixels: a converged linear classifier
on the final probe's data (in every run's results).
"""

from __future__ import annotations

import ml_collections

from lasp_jax.eval import health
from lasp_jax.method import registry


def names(method: str) -> tuple:
  """The bounds run beside ``method``: its family's (registry.BOUNDS)."""
  return registry.bounds(method)


def baseline_config(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  """``config`` with the method replaced by baseline ``name``; everything else as it is."""
  out = ml_collections.ConfigDict(config.to_dict())
  out.method = name
  return out


def comparison(results: dict) -> str:
  """A method-by-method table of the final accuracies, raw pixels last; a run that failed a health check
  carries a dagger and the checks it failed are listed below the table."""
  first = next(iter(results.values()))
  metrics = list(first["final"])
  lines = [f"{'':28}" + "".join(f"{m:>12}" for m in metrics)]
  notes = []
  for name, res in results.items():
    label = name + health.mark(res)
    lines.append(f"{label:28}" + "".join(f"{res['final'][m]:12.2f}" for m in metrics))
    if health.is_flagged(res):
      notes.append(f"† {name}: failed health checks {', '.join(health.flagged_checks(res))} (see its results.json)")
  pixels = first.get("baselines", {}).get("raw_pixels")
  if pixels:
    lines.append(f"{'raw pixels (linear)':28}" + "".join(f"{pixels[m]:12.2f}" for m in metrics))
  return "\n".join(lines + notes)
