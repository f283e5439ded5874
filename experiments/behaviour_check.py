"""Tiny runs of every method whose results a refactor must leave unchanged: run them before and after, compare.

    python -m experiments.behaviour_check --out=/tmp/before           # at the old commit
    python -m experiments.behaviour_check --out=/tmp/after --compare=/tmp/before

Each case is configs/tiny.py with a few keys (every method on 2 Split tasks, the cross-entropy family under the
DER paper's protocol, a 3-domain SD run, two seeds one after another and vmapped, a detected-boundary run, runs
stopped mid-task and resumed); a case's record is its
results.json without wall-clock figures and provenance. The comparison prints one line per case, equal or the
first keys that differ, and exits 1 if any differ.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

from absl import flags, logging

from lasp_jax import errors

FLAGS = flags.FLAGS

TWO = {"data.num_tasks": 2, "train.epochs_first": 2, "train.epochs": 1}
DER = {"model.name": "mlp", "model.hidden": (32, 32), "augment.train": False, "train.epochs_first": 1,
       "train.schedule": "constant", "train.momentum": 0.0, "train.weight_decay": 0.0, "train.batch_size": 10,
       "train.lr": 0.05, "method_args.minibatch_size": 10}
CASES = {
    **{m: {**TWO, "method": m} for m in ("sd", "co2l", "gm", "sd_gm", "finetune", "joint")},
    "sd_3_domains": {**TWO, "data.num_tasks": 3, "data.scenario": "domain", "model.normalize_embedding": False,
                     "lasp.srs_data": "onlypast", "train.lr": 0.01, "eval.raw_pixels": False},
    "sd_two_seeds": {**TWO, "num_seeds": 2},
    "sd_vmapped_seeds": {**TWO, "num_seeds": 2, "seeds_mode": "vmap"},
    "sd_detected": {**TWO, "boundaries": "detected"},
    "sd_resumed": {**TWO, "train.checkpoint_every_steps": 2},
    # the cross-entropy family under the DER paper's MNIST protocol (an MLP, one epoch, constant SGD)
    **{f"{m}_der": {**TWO, **DER, "method": m} for m in ("ce_finetune", "ce_joint", "er", "der", "derpp", "agem",
                                                         "gem", "icarl", "fdr", "gss", "hal")},
    "derpp_vmapped_seeds": {**TWO, **DER, "method": "derpp", "num_seeds": 2, "seeds_mode": "vmap"},
    "er_resumed": {**TWO, **DER, "method": "er", "train.checkpoint_every_steps": 4, "train.steps_per_call": 4},
    # and on the conv net with momentum and weight decay (the threats' replay cells)
    "er": {**TWO, "method": "er"}, "derpp": {**TWO, "method": "derpp"},
}
# A case here stops at this fault point (checkpoint.fault_point) and is resumed in the same process.
STOP_AT = {"sd_resumed": "step:1:0:2", "er_resumed": "step:1:0:3"}


def run_case(name: str, out: pathlib.Path) -> dict:
  from configs import tiny  # noqa: PLC0415  (jax after the flags)
  from lasp_jax import (  # noqa: PLC0415
    config_lib,
    report,
    seeds,  # noqa: PLC0415
    train,
  )
  from lasp_jax.loop import checkpoint  # noqa: PLC0415
  config = config_lib.override(tiny.get_config(), pictures=False, **CASES[name])
  wd = out / name
  if config.num_seeds > 1:
    return {"seeds": [report.without_volatile(r) for r in seeds.SeedGroup(config, wd).run()]}
  if name in STOP_AT:
    os.environ.update(LASP_FAULT=STOP_AT[name], LASP_FAULT_MODE="raise")
    try:
      train.train_and_evaluate(config, wd)
      raise SystemExit(f"error: case {name} never reached {STOP_AT[name]}")
    except checkpoint.FaultInjected:
      pass
    finally:
      del os.environ["LASP_FAULT"], os.environ["LASP_FAULT_MODE"]
  return report.without_volatile(train.train_and_evaluate(config, wd))


def differences(a, b, path="") -> list[str]:
  if isinstance(a, dict) and isinstance(b, dict):
    return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
  if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
    return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
  return [] if a == b else [path or "."]


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)  # Orbax logs every save at INFO
  out = pathlib.Path(FLAGS.out)
  unknown = [c for c in FLAGS.cases or [] if c not in CASES]
  if unknown:
    raise errors.ConfigError(f"unknown --cases {', '.join(unknown)}; expected some of {', '.join(CASES)}")
  out.mkdir(parents=True, exist_ok=True)
  records = {name: run_case(name, out) for name in FLAGS.cases or CASES}
  (out / "records.json").write_text(json.dumps(records, sort_keys=True))
  if not FLAGS.compare:
    print(f"records: {out / 'records.json'}")
    return
  before = json.loads((pathlib.Path(FLAGS.compare) / "records.json").read_text())
  bad = 0
  for name, rec in records.items():
    diff = differences(before.get(name), rec)
    bad += bool(diff)
    print(f"{name}: " + ("equal" if not diff else f"DIFFERS at {', '.join(diff[:5])}"))
  sys.exit(1 if bad else 0)


if __name__ == "__main__":
  flags.DEFINE_string("out", "/tmp/lasp_behaviour", "Where the cases run and records.json is written.")
  flags.DEFINE_list("cases", None, "Some of the cases (default: all).")
  flags.DEFINE_string("compare", "", "A folder with an earlier records.json: compare against it.")
  errors.run_app(main)
