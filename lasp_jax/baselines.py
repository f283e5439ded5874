"""The baselines run beside a method (``main --baselines``) and the comparison table they make.

finetune: the same SupCon training on each task alone, no replay, no
distillation (the lower bound; its probe gets the same memory as the method's,
so the two representations are read out on the same data). joint: every task
so far at once, same step budget (the upper bound). Raw pixels: a converged
linear classifier on the final probe's data (in every run's results).
"""

from __future__ import annotations

import ml_collections

from lasp_jax import config_lib

NAMES = config_lib.BASELINES


def baseline_config(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  """``config`` with the method replaced by baseline ``name``; everything else as it is."""
  return config_lib.override(ml_collections.ConfigDict(config.to_dict()), method=name)


def comparison(results: dict) -> str:
  """A method-by-method table of the final accuracies, raw pixels last."""
  first = next(iter(results.values()))
  metrics = list(first["final"])
  lines = [f"{'':28}" + "".join(f"{m:>12}" for m in metrics)]
  for name, res in results.items():
    lines.append(f"{name:28}" + "".join(f"{res['final'][m]:12.2f}" for m in metrics))
  pixels = first.get("baselines", {}).get("raw_pixels")
  if pixels:
    lines.append(f"{'raw pixels (linear)':28}" + "".join(f"{pixels[m]:12.2f}" for m in metrics))
  return "\n".join(lines)
