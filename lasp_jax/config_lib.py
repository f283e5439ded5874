"""Checks a run configuration and derives what the published code derives.

Every check raises :class:`ConfigError` with one line naming the bad key.
"""

from __future__ import annotations

import hashlib
import json

import ml_collections

# Without jax (choices.py): main.py checks a config before the library loads.
from lasp_jax import choices
from lasp_jax.data import sources
from lasp_jax.errors import ConfigError
from lasp_jax.method import methods as methods_lib
from lasp_jax.platform import cpu_kernels

BASELINES = methods_lib.BASELINES
# Keys that may change between a run and its resumption.
# "preset" is here because runs see resolved configs: its effect is in the keys it sets.
# "model.cpu_convs" picks kernels, which change results only by float32 rounding.
RESUME_FREE_KEYS = ("resume", "progress", "pictures", "train.checkpoint_every_steps", "data.data_dir", "provenance",
                    "preset", "model.cpu_convs", "seeds_mode")


SEEDS_MODES = ("auto", "vmap", "sequential")


def _choice(name, value, allowed):
  if value not in allowed:
    raise ConfigError(f"unknown {name} {value!r}; expected one of {list(allowed)}")


def _at_least(name, value, low):
  if value < low:
    raise ConfigError(f"{name} must be >= {low}, got {value}")


def _positive(name, value):
  if not value > 0:
    raise ConfigError(f"{name} must be > 0, got {value}")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError on the first invalid setting."""
  _choice("dataset", config.dataset, sorted(sources.SOURCES))
  _choice("method", config.method, methods_lib.METHODS)
  if config.data.source not in choices.DATA_SOURCES.get(config.dataset, (config.data.source,)):
    raise ConfigError(f"data.source {config.data.source!r} does not apply to dataset {config.dataset!r}; expected one "
                      f"of {list(choices.DATA_SOURCES[config.dataset])}")
  _choice("seeds_mode", config.get("seeds_mode", "auto"), SEEDS_MODES)
  _choice("lasp.srs_data", config.lasp.srs_data, choices.SRS_DATA)
  _choice("lasp.subset", config.lasp.get("subset", "searched"), choices.SUBSETS)
  _choice("lasp.mask_objective", config.lasp.mask_objective, choices.MASK_OBJECTIVES)
  _choice("lasp.restart_selection", config.lasp.restart_selection, choices.RESTART_SELECTIONS)
  _choice("model.past_bn", config.model.past_bn, choices.PAST_BN)
  _choice("data.scenario", config.data.scenario, choices.SCENARIOS)
  _choice("compute_dtype", config.compute_dtype, choices.COMPUTE_DTYPES)
  _choice("train.warmup_target", config.train.warmup_target, choices.WARMUP_TARGETS)
  _choice("train.schedule", config.train.schedule, choices.SCHEDULES)
  _choice("resume", config.resume, choices.RESUME)
  _choice("eval.probe", config.eval.probe, choices.PROBES)
  _choice("model.name", config.model.name, choices.MODELS)
  _choice("model.conv_backward", config.model.conv_backward, cpu_kernels.CONV_BACKWARD)
  _choice("model.cpu_convs", config.model.cpu_convs, cpu_kernels.CONVS)
  _choice("model.winograd", config.model.winograd, choices.WINOGRAD)
  _choice("boundaries", config.boundaries, choices.BOUNDARIES)
  _choice("detection.detector", config.detection.detector, choices.DETECTORS)
  _at_least("detection.window", config.detection.window, 2)
  _positive("detection.shift_threshold", config.detection.shift_threshold)
  if config.boundaries == "detected" and method(config).cumulative:
    raise ConfigError(f"method {config.method!r} trains on every earlier task's data: it needs "
                      f"boundaries='given'")
  if config.boundaries == "detected" and config.num_seeds > 1 and config.seeds_mode == "vmap":
    raise ConfigError("boundaries='detected' with seeds_mode='vmap': the seeds' boundaries need not coincide; "
                      "use seeds_mode=sequential")
  _positive("train.lr", config.train.lr)
  _positive("eval.lr", config.eval.lr)
  _positive("train.temperature", config.train.temperature)
  _positive("train.base_temperature", config.train.base_temperature)
  _positive("train.ird_temp_cur", config.train.ird_temp_cur)
  _positive("train.ird_temp_past", config.train.ird_temp_past)
  _positive("model.width", config.model.width)
  if not 0.0 <= config.train.momentum < 1.0:
    raise ConfigError(f"train.momentum must be in [0, 1), got {config.train.momentum}")
  if not 0.0 < config.train.lr_min_ratio <= 1.0:
    raise ConfigError(f"train.lr_min_ratio must be in (0, 1], got {config.train.lr_min_ratio}")
  if config.train.weight_decay < 0:
    raise ConfigError(f"train.weight_decay must be >= 0, got {config.train.weight_decay}")
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
  _at_least("lasp.eb_replicas", config.lasp.eb_replicas, 1)
  _at_least("num_seeds", config.num_seeds, 1)
  _at_least("model.bn_groups", config.model.bn_groups, 1)
  if config.train.batch_size % config.model.bn_groups:
    raise ConfigError(f"train.batch_size {config.train.batch_size} is not divisible by model.bn_groups "
                      f"{config.model.bn_groups}")
  if config.train.tail_multiple < 0 or config.train.batch_size % max(config.train.tail_multiple, 1):
    raise ConfigError(f"train.tail_multiple must be 0 or divide train.batch_size {config.train.batch_size}, got "
                      f"{config.train.tail_multiple}")
  if config.train.tail_multiple and config.model.bn_groups > 1:
    raise ConfigError("train.tail_multiple needs model.bn_groups=1: a narrower step would group its BatchNorm rows "
                      "differently")
  if config.data.rotation_angles and len(config.data.rotation_angles) != config.data.num_tasks:
    raise ConfigError(f"data.rotation_angles has {len(config.data.rotation_angles)} angles for "
                      f"{config.data.num_tasks} tasks")
  if config.memory.size < 0:
    raise ConfigError(f"memory.size must be >= 0, got {config.memory.size}")
  if config.memory.size == 0 and config.lasp.srs_data == "onlypast" and method(config).looks_ahead:
    raise ConfigError("lasp.srs_data='onlypast' searches the replay memory, but memory.size is 0: nothing to search")
  if config.data.get("validation_per_class", 0) < 0:
    raise ConfigError(f"data.validation_per_class must be >= 0, got {config.data.validation_per_class}")
  unknown = [n for n in config.eval.get("final_readouts", ()) if n not in choices.PROBES]
  if unknown:
    raise ConfigError(f"eval.final_readouts: unknown read-out {', '.join(unknown)}; expected some of "
                      f"{', '.join(choices.PROBES)}")
  if config.data.get("train_per_class", 0) < 0:
    raise ConfigError(f"data.train_per_class must be >= 0 (0: every training image), got "
                      f"{config.data.train_per_class}")


# model.embedding_dim = 0 in a config: the published size for the method on that dataset.
PUBLISHED_EMBEDDING_DIM = {"tiny_imagenet": {"co2l": 128, "finetune": 128, "joint": 128, "default": 512}}


# preset = "published": every behaviour of the published code that lasp_jax fixes by default
# (docs/protocol.md), set at once for side-by-side runs with it.
PUBLISHED_PRESET = {
    "lasp.mask_objective": "published_all_pairs",
    "lasp.restart_selection": "published_off_by_one",
    "model.past_bn": "running",
    "data.rmnist_test_uses_last_angle": True,
    "train.warmup_target": "published",
    "train.schedule": "published_epoch_cosine",
    "eval.probe": "sgd",
    "eval.standardize": False,
    "eval.select_best_on_test": True,
    "eval.every_task": False,
    "eval.decay_epochs": (60, 75, 90),  # main_linear_buffer*.py: absolute epochs, whatever --epochs is
    # The published runs used nn.DataParallel over two GPUs without SyncBN: see model.bn_groups, lasp.eb_replicas.
    "model.bn_groups": 2,
    "lasp.eb_replicas": 2,
}
PRESETS = {"": {}, "published": PUBLISHED_PRESET}


def resolved(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy with every derived setting filled in: the preset's keys (they win over the
  config's), and ``model.embedding_dim = 0`` -> the published size for the method."""
  c = ml_collections.ConfigDict(config.to_dict())
  _choice("preset", c.get("preset", ""), PRESETS)
  override(c, **PRESETS[c.get("preset", "")])
  if c.get("preset", "") == "published":
    # The published commands' look-ahead data: R-MNIST SD searched on --onlypast, everything else on --onlycurrent.
    c.lasp.srs_data = method(c).published_srs_data.get(c.data.scenario, "onlycurrent")
  if c.model.embedding_dim == 0:
    sizes = PUBLISHED_EMBEDDING_DIM.get(c.dataset, {})
    c.model.embedding_dim = sizes.get(c.method, sizes.get("default", 128))
  c.lock()
  return c


def override(config, **dotted):
  """Sets ``{"a.b": value}`` keys on a ConfigDict in place and returns it."""
  for key, value in dotted.items():
    node = config
    *path, last = key.split(".")
    for p in path:
      node = node[p]
    node[last] = value
  return config


def method(config) -> methods_lib.Method:
  """The method object ``config.method`` names (methods.METHODS)."""
  return methods_lib.METHODS[config.method]


def ird_weight(config) -> float:
  w = config.train.ird_weight
  if not method(config).distills:
    return 0.0
  return method(config).ird_weight if w is None or w < 0 else float(w)



def augment_config(config, *, rotate: bool):
  """The augmentation's settings (an ``augment.AugmentConfig``); ``rotate``: the stream's (domain angles)."""
  from lasp_jax.data.augment import AugmentConfig  # noqa: PLC0415  (jax)
  a = config.augment
  norm = dict(mean=tuple(a.mean), std=tuple(a.std)) if a.normalize else {}
  return AugmentConfig(size=a.size, crop_scale=tuple(a.crop_scale), flip=a.flip, jitter_p=a.jitter_p,
                       grayscale_p=a.grayscale_p, blur_p=a.blur_p, rotate=rotate,
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


# Keys added after runs were recorded, with the value that reproduces those runs: at that
# value they are left out of diffs and hashes, so earlier results and checkpoints still match.
LATER_KEYS = {"lasp.eb_replicas": 1, "model.bn_groups": 1, "num_seeds": 1, "data.train_per_class": 0,
              "lasp.subset": "searched", "train.tail_multiple": 0, "data.validation_per_class": 0,
              "eval.decay_epochs": [], "eval.final_readouts": [], "model.winograd": 0}  # flat() gives tuples as lists


def _value(d: dict, key: str):
  return d.get(key, LATER_KEYS.get(key))


def differing_keys(old: dict, new: dict) -> list[str]:
  """Keys whose values differ, ignoring those that may change on resume."""
  return sorted(k for k in set(old) | set(new) if _value(old, k) != _value(new, k) and _matters(k))


def config_hash(config) -> str:
  """Short hash of everything that changes a run's results."""
  items = {k: v for k, v in flat(config).items() if _matters(k) and not (k in LATER_KEYS and v == LATER_KEYS[k])}
  return hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode()).hexdigest()[:12]
