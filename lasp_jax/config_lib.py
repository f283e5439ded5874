"""Checks a run configuration and derives what the published code derives.

Every check raises :class:`ConfigError` with one line naming the bad key.
"""

from __future__ import annotations

import hashlib
import json

import ml_collections

from lasp_jax import lookahead, mask_search
from lasp_jax.data import sources
from lasp_jax.data.augment import AugmentConfig
from lasp_jax.errors import ConfigError

METHODS = ("co2l", "sd", "gm", "sd_gm")
# Published IRD weight (--distill_power) per method.
DEFAULT_IRD_WEIGHT = {"co2l": 1.0, "gm": 1.0, "sd": 5.0, "sd_gm": 5.0}
# Keys that may change between a run and its resumption.
RESUME_FREE_KEYS = ("resume", "progress", "train.checkpoint_every_steps", "data.data_dir")


def _choice(name, value, allowed):
  if value not in allowed:
    raise ConfigError(f"unknown {name} {value!r}; expected one of {list(allowed)}")


def _at_least(name, value, low):
  if value < low:
    raise ConfigError(f"{name} must be >= {low}, got {value}")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError on the first invalid setting."""
  _choice("dataset", config.dataset, sorted(sources.SOURCES))
  _choice("method", config.method, METHODS)
  _choice("lasp.srs_data", config.lasp.srs_data, lookahead.SRS_DATA)
  _choice("lasp.mask_objective", config.lasp.mask_objective, mask_search.OBJECTIVES)
  _choice("lasp.restart_selection", config.lasp.restart_selection, mask_search.SELECTIONS)
  _choice("model.past_bn", config.model.past_bn, ("batch", "running"))
  _choice("data.scenario", config.data.scenario, ("class", "domain"))
  _choice("compute_dtype", config.compute_dtype, ("float32", "bfloat16"))
  _choice("train.warmup_target", config.train.warmup_target, ("task", "published"))
  _choice("resume", config.resume, ("auto", "force", "never"))
  _at_least("model.embedding_dim", config.model.embedding_dim, 2)
  _at_least("train.batch_size", config.train.batch_size, 2)
  _at_least("train.epochs_first", config.train.epochs_first, 1)
  _at_least("train.epochs", config.train.epochs, 1)
  _at_least("train.steps_per_call", config.train.steps_per_call, 1)
  _at_least("eval.epochs", config.eval.epochs, 1)
  _at_least("eval.batch_size", config.eval.batch_size, 1)
  _at_least("data.num_tasks", config.data.num_tasks, 1)
  _at_least("lasp.restarts", config.lasp.restarts, 1)
  _at_least("lasp.steps", config.lasp.steps, 1)
  if config.memory.size < 0:
    raise ConfigError(f"memory.size must be >= 0, got {config.memory.size}")


def override(config, **dotted):
  """Sets ``{"a.b": value}`` keys on a ConfigDict in place and returns it."""
  for key, value in dotted.items():
    node = config
    *path, last = key.split(".")
    for p in path:
      node = node[p]
    node[last] = value
  return config


def ird_weight(config) -> float:
  w = config.train.ird_weight
  return DEFAULT_IRD_WEIGHT[config.method] if w is None or w < 0 else float(w)


def uses_sd(config) -> bool:
  return config.method in ("sd", "sd_gm")


def uses_gm(config) -> bool:
  return config.method in ("gm", "sd_gm")


def augment_config(config) -> AugmentConfig:
  a = config.augment
  norm = dict(mean=tuple(a.mean), std=tuple(a.std)) if a.normalize else {}
  return AugmentConfig(size=a.size, crop_scale=tuple(a.crop_scale), flip=a.flip, jitter_p=a.jitter_p,
                       grayscale_p=a.grayscale_p, blur_p=a.blur_p, rotate=config.data.scenario == "domain",
                       **norm)


def flat(config) -> dict:
  """{'a.b': value} view of a ConfigDict (tuples as lists), for JSON and diffs."""
  out = {}

  def walk(prefix, node):
    for k, v in node.items():
      key = f"{prefix}{k}"
      if isinstance(v, (ml_collections.ConfigDict, dict)):
        walk(key + ".", v)
      else:
        out[key] = list(v) if isinstance(v, tuple) else v
  walk("", config)
  return out


def _matters(key: str) -> bool:
  return not any(key == f or key.startswith(f + ".") for f in RESUME_FREE_KEYS)


def differing_keys(old: dict, new: dict) -> list[str]:
  """Keys whose values differ, ignoring those that may change on resume."""
  return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and _matters(k))


def config_hash(config) -> str:
  """Short hash of everything that changes a run's results."""
  items = {k: v for k, v in flat(config).items() if _matters(k)}
  return hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode()).hexdigest()[:12]
