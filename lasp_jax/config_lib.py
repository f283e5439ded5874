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
from lasp_jax.method import registry
from lasp_jax.platform import cpu_kernels

BASELINES = registry.BASELINES
# Keys that may change between a run and its resumption.
# "preset" is here because runs see resolved configs: its effect is in the keys it sets.
# "model.cpu_convs" picks kernels, which change results only by float32 rounding.
RESUME_FREE_KEYS = ("resume", "progress", "pictures", "train.checkpoint_every_steps", "data.data_dir", "provenance",
                    "preset", "model.cpu_convs", "seeds_mode")


SEEDS_MODES = ("auto", "vmap", "sequential")


# Each key's allowed values, its lower bound, or > 0: checked in this order, the first failure raised.
_CHOICES = {
    "dataset": sorted(sources.SOURCES), "method": registry.METHODS, "seeds_mode": SEEDS_MODES,
    "lasp.srs_data": choices.SRS_DATA, "lasp.subset": choices.SUBSETS,
    "lasp.mask_objective": choices.MASK_OBJECTIVES, "lasp.restart_selection": choices.RESTART_SELECTIONS,
    "model.past_bn": choices.PAST_BN, "data.scenario": choices.SCENARIOS, "compute_dtype": choices.COMPUTE_DTYPES,
    "train.warmup_target": choices.WARMUP_TARGETS, "train.schedule": choices.SCHEDULES, "resume": choices.RESUME,
    "eval.probe": choices.PROBES, "model.name": choices.MODELS, "model.conv_backward": cpu_kernels.CONV_BACKWARD,
    "model.cpu_convs": cpu_kernels.CONVS, "model.winograd": choices.WINOGRAD, "boundaries": choices.BOUNDARIES,
    "detection.detector": choices.DETECTORS, "method_args.exemplars": choices.EXEMPLARS,
}
_POSITIVE = ("detection.shift_threshold", "train.lr", "eval.lr", "train.temperature", "train.base_temperature",
             "train.ird_temp_cur", "train.ird_temp_past", "model.width")
_AT_LEAST = {
    "detection.window": 2, "model.embedding_dim": 2, "train.batch_size": 2, "train.epochs_first": 1,
    "train.epochs": 1, "train.steps_per_call": 1, "eval.epochs": 1, "eval.batch_size": 1, "data.num_tasks": 1,
    "lasp.restarts": 1, "lasp.steps": 1, "lasp.eb_replicas": 1, "num_seeds": 1, "model.bn_groups": 1,
    "train.weight_decay": 0, "memory.size": 0, "data.validation_per_class": 0, "data.train_per_class": 0,
    "method_args.minibatch_size": 0, "method_args.alpha": 0, "method_args.beta": 0, "method_args.gamma": 0,
    "method_args.gss_minibatch_size": 0,
}


def _fail(condition, message: str) -> None:
  if condition:
    raise ConfigError(message)


def _check_choice(key: str, value) -> None:
  allowed = _CHOICES[key]
  _fail(value not in allowed, f"unknown {key} {value!r}; expected one of {list(allowed)}")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError on the first invalid setting."""
  filled = _with_later_keys(config)  # an older config's missing keys mean their first values
  values = flat(filled)
  missing = [k for k in (*_CHOICES, *_POSITIVE, *_AT_LEAST) if k not in values]
  more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
  _fail(missing, f"the config lacks {', '.join(missing[:3])}{more}: build it on default_config.base_config()")
  for key in _CHOICES:
    _check_choice(key, values[key])
  for key in _POSITIVE:
    _fail(not values[key] > 0, f"{key} must be > 0, got {values[key]}")
  for key, low in _AT_LEAST.items():
    _fail(values[key] < low, f"{key} must be >= {low}, got {values[key]}")
  _check_ranges(filled)
  _check_combinations(filled)


def _with_later_keys(config) -> ml_collections.ConfigDict:
  """A copy of ``config`` with each of LATER_KEYS it lacks at its first value."""
  c = ml_collections.ConfigDict(config.to_dict())
  for key, value in LATER_KEYS.items():
    *parents, leaf = key.split(".")
    node = c
    for part in parents:
      if part not in node:
        node[part] = ml_collections.ConfigDict()
      node = node[part]
    if leaf not in node:
      node[leaf] = tuple(value) if isinstance(value, list) else value
  return c


def _check_ranges(c) -> None:
  _fail(not 0.0 <= c.train.momentum < 1.0, f"train.momentum must be in [0, 1), got {c.train.momentum}")
  _fail(not 0.0 < c.train.lr_min_ratio <= 1.0, f"train.lr_min_ratio must be in (0, 1], got {c.train.lr_min_ratio}")
  _fail(c.train.tail_multiple < 0 or c.train.batch_size % max(c.train.tail_multiple, 1),
        f"train.tail_multiple must be 0 or divide train.batch_size {c.train.batch_size}, got {c.train.tail_multiple}")
  unknown = [n for n in c.eval.get("final_readouts", ()) if n not in choices.PROBES]
  _fail(bool(unknown), f"eval.final_readouts: unknown read-out {', '.join(unknown)}; expected some of "
                       f"{', '.join(choices.PROBES)}")


def _check_combinations(c) -> None:
  sources_ok = choices.DATA_SOURCES.get(c.dataset, (c.data.source,))
  _fail(c.data.source not in sources_ok, f"data.source {c.data.source!r} does not apply to dataset {c.dataset!r}; "
                                         f"expected one of {list(sources_ok)}")
  traits = registry.traits(c.method)
  _fail(c.boundaries == "detected" and traits["cumulative"],
        f"method {c.method!r} trains on every earlier task's data: it needs boundaries='given'")
  _fail(c.data.scenario not in traits["scenarios"],
        f"method {c.method!r} is defined for data.scenario {' or '.join(traits['scenarios'])}, not "
        f"{c.data.scenario!r}")
  exemplars = (c.get("method_args") or {}).get("exemplars", "images")  # a config from before the key: the default
  keepers = " or ".join(repr(m) for m in registry.METHODS if registry.traits(m)["keeps_exemplars"])
  _fail(exemplars != "images" and not traits["keeps_exemplars"],
        f"method_args.exemplars={exemplars!r} applies to method {keepers} only, not {c.method!r}")
  _fail(c.boundaries == "detected" and traits["task_ends"],
        f"method {c.method!r} writes its memory where each task ends: it needs boundaries='given'")
  _fail(c.boundaries == "detected" and c.num_seeds > 1 and c.seeds_mode == "vmap",
        "boundaries='detected' with seeds_mode='vmap': the seeds' boundaries need not coincide; "
        "use seeds_mode=sequential")
  _fail(c.train.batch_size % c.model.bn_groups,
        f"train.batch_size {c.train.batch_size} is not divisible by model.bn_groups {c.model.bn_groups}")
  _fail(c.train.tail_multiple and c.model.bn_groups > 1,
        "train.tail_multiple needs model.bn_groups=1: a narrower step would group its BatchNorm rows differently")
  angles = len(c.data.rotation_angles or ())
  _fail(angles and angles != c.data.num_tasks, f"data.rotation_angles has {angles} angles for {c.data.num_tasks} tasks")
  _fail(c.memory.size == 0 and c.lasp.srs_data == "onlypast" and traits["looks_ahead"],
        "lasp.srs_data='onlypast' searches the replay memory, but memory.size is 0: nothing to search")


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
  preset = c.get("preset", "")
  _fail(preset not in PRESETS, f"unknown preset {preset!r}; expected one of {list(PRESETS)}")
  override(c, **PRESETS[preset])
  if preset == "published":
    _check_choice("method", c.method)  # the preset reads the method's traits: a misspelled name is one line here
    # The published commands' look-ahead data: R-MNIST SD searched on --onlypast, everything else on --onlycurrent.
    c.lasp.srs_data = registry.traits(c.method)["published_srs_data"].get(c.data.scenario, "onlycurrent")
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


def method(config):
  """The method object ``config.method`` names (method/registry.py; its module, and jax, load here)."""
  return registry.get(config.method)


def ird_weight(config) -> float:
  """The run's distillation weight lambda (Method.distillation_weight)."""
  return method(config).distillation_weight(config)



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
LATER_KEYS = {"seeds_mode": "auto", "lasp.eb_replicas": 1, "model.bn_groups": 1, "num_seeds": 1,
              "data.train_per_class": 0, "lasp.subset": "searched", "train.tail_multiple": 0,
              "data.validation_per_class": 0,
              "eval.decay_epochs": [], "eval.final_readouts": [], "model.winograd": 0,  # flat() gives tuples as lists
              "model.hidden": [100, 100], "augment.train": True, "method_args.minibatch_size": 0,
              "method_args.alpha": 0.1, "method_args.beta": 0.5, "method_args.gamma": 0.5,
              "method_args.gss_minibatch_size": 0, "method_args.hal_lambda": 0.1, "method_args.task_samples": 0,
              "method_args.exemplars": "images"}


def _value(d: dict, key: str):
  return d.get(key, LATER_KEYS.get(key))


def differing_keys(old: dict, new: dict) -> list[str]:
  """Keys whose values differ, ignoring those that may change on resume."""
  return sorted(k for k in set(old) | set(new) if _value(old, k) != _value(new, k) and _matters(k))


def config_hash(config) -> str:
  """Short hash of everything that changes a run's results."""
  items = {k: v for k, v in flat(config).items() if _matters(k) and not (k in LATER_KEYS and v == LATER_KEYS[k])}
  return hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode()).hexdigest()[:12]
