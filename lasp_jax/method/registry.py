"""Every method by name: one line each, ``name: "module:Class"`` under ``lasp_jax/method/``.

No jax here: the config check (config_lib) reads the names before the library loads; a method's module (which
imports jax) loads when a run asks for it (:func:`get`). A test may register a method object directly.
"""

from __future__ import annotations

import importlib

METHODS: dict = {
    # the contrastive family (contrastive.py): SupCon on two views + lambda x distillation, read out by a probe
    "co2l": "contrastive:Co2L",
    "sd": "contrastive:SD",
    "gm": "contrastive:GM",
    "sd_gm": "contrastive:SDGM",
    "finetune": "contrastive:Finetune",
    "joint": "contrastive:Joint",
    # the cross-entropy family (classifier.py): a classifier head, read out by it
    "ce_finetune": "classifier:Classifier",
    "ce_joint": "classifier:JointClassifier",
    "er": "er:ER",
    "der": "der:DER",
    "derpp": "derpp:DERpp",
    "agem": "agem:AGEM",
    "gem": "gem:GEM",
    "icarl": "icarl:ICaRL",
    "fdr": "fdr:FDR",
    "gss": "gss:GSS",
    "hal": "hal:HAL",
}
FAMILIES = {"contrastive": ("co2l", "sd", "gm", "sd_gm", "finetune", "joint"),
            "cross-entropy": ("ce_finetune", "ce_joint", "er", "der", "derpp", "agem", "gem", "icarl", "fdr", "gss",
                              "hal")}
# Each family's lower and upper bound (--baselines): the same network, schedule and read-out, no memory / every
# task so far.
BOUNDS = {"contrastive": ("finetune", "joint"), "cross-entropy": ("ce_finetune", "ce_joint")}
BASELINES = BOUNDS["contrastive"]


def bounds(name: str) -> tuple:
  """The bounds of the family a method belongs to (a method registered only by a test: the contrastive ones)."""
  return next((BOUNDS[f] for f, names in FAMILIES.items() if name in names), BASELINES)

# What the config check asks of a method before jax loads (its class says the same: tests/test_methods.py holds
# them equal), where it differs from DEFAULT_TRAITS.
DEFAULT_TRAITS = {"cumulative": False, "task_ends": False, "looks_ahead": False, "scenarios": ("class", "domain"),
                  "published_srs_data": {}, "selective": False, "norm_diverges": True, "keeps_exemplars": False}
FAMILY_TRAITS = {"cross-entropy": {"norm_diverges": False}}
TRAITS = {
    "sd": {"looks_ahead": True, "selective": True, "published_srs_data": {"domain": "onlypast"}},
    "gm": {"looks_ahead": True}, "sd_gm": {"looks_ahead": True, "selective": True},
    "joint": {"cumulative": True}, "ce_joint": {"cumulative": True},
    "agem": {"task_ends": True}, "gem": {"task_ends": True}, "fdr": {"task_ends": True}, "hal": {"task_ends": True},
    "icarl": {"task_ends": True, "scenarios": ("class",), "keeps_exemplars": True},
}

_LOADED: dict = {}


def traits(name: str) -> dict:
  """The config check's and health's view of a method, without importing it (a test's own method object: read
  from it)."""
  entry = METHODS[name]
  if not isinstance(entry, str):
    return {k: getattr(entry, k) for k in DEFAULT_TRAITS}
  family = next((f for f, names in FAMILIES.items() if name in names), None)
  return {**DEFAULT_TRAITS, **FAMILY_TRAITS.get(family, {}), **TRAITS.get(name, {})}


def get(name: str):
  """The method object registered under ``name`` (its module imported on first use)."""
  entry = METHODS[name]
  if not isinstance(entry, str):
    return entry
  if entry not in _LOADED:
    module, cls = entry.split(":")
    _LOADED[entry] = getattr(importlib.import_module(f"lasp_jax.method.{module}"), cls)()
  return _LOADED[entry]


def names() -> list[str]:
  return list(METHODS)
