"""--config.num_seeds=N: seeds trained as one vmapped program equal separate runs, and resume together."""

import json
import pathlib

import jax
import numpy as np
import pytest

from lasp_jax import config_lib, seeds, train
from lasp_jax.errors import ConfigError
from lasp_jax.eval import baselines
from tests.conftest import tiny_config

# Asserts outcomes of training: CI checks it under a second XLA:CPU code path too (.ci/run).
pytestmark = pytest.mark.trajectory

BASE = {"data.num_tasks": 2, "method": "sd", "progress": False, "train.epochs_first": 1, "train.epochs": 1,
        "eval.raw_pixels": False, "seeds_mode": "vmap", "model.name": "mlp", "model.hidden": (64,)}


def test_vmapped_seeds_equal_separate_runs_and_resume_after_a_crash_between_seeds(tmp_path, monkeypatch):
  # First attempt dies after seed 0 saved task 0 and before seed 1 did: seed 1 is one task behind.
  real_after = train.after_task
  calls = []

  def crash_on_second(ctx, carry, t, on_task_end=None):
    calls.append((ctx.config.seed, t))
    if len(calls) == 2:
      raise KeyboardInterrupt("killed between the seeds' task-end checkpoints")
    real_after(ctx, carry, t, on_task_end)

  monkeypatch.setattr(train, "after_task", crash_on_second)
  group_dir = tmp_path / "group"
  with pytest.raises(KeyboardInterrupt):
    seeds.SeedGroup(tiny_config(**BASE, num_seeds=2), group_dir).run()
  assert calls == [(0, 0), (1, 0)]
  monkeypatch.setattr(train, "after_task", real_after)
  group = seeds.SeedGroup(tiny_config(**BASE, num_seeds=2), group_dir)
  assert [c.seed for c in group.configs] == [0, 1]
  results = group.run()

  single = train.train_and_evaluate(tiny_config(**dict(BASE, seeds_mode="auto"), seed=1), tmp_path / "single")
  assert results[1]["config_hash"] == single["config_hash"]  # seed k of a group is the single run of seed k
  # The vmapped chunk is another program than a single run's: equal up to float rounding (the losses to 1e-5);
  # a read-out may then flip a test image or two (0.1 point each), by how much depends on the CPU's code path.
  loss = lambda r: [c["loss"] for c in r["curves"]]
  np.testing.assert_allclose(loss(results[1]), loss(single), rtol=1e-5)
  for name in single["final"]:
    assert abs(results[1]["final"][name] - single["final"][name]) <= 0.3, (results[1]["final"], single["final"])
    np.testing.assert_allclose(np.array(results[1]["acc_matrix"][name], float), np.array(single["acc_matrix"][name],
                                                                                           float), atol=0.3)
  assert results[0]["final"] != results[1]["final"] and loss(results[0]) != loss(results[1])  # the seeds differ
  on_disk = json.loads((group_dir / "seed_1" / "results.json").read_text())
  assert on_disk["final"] == results[1]["final"] and on_disk["seed"] == 1
  table = (group_dir / "seeds.md").read_text()
  mean = np.mean([r["final"]["class_il"] for r in results])
  assert f"| mean (std), 2 seeds | {mean:.2f}" in table


def test_seed_table_and_mean_by_hand():
  rs = [{"seed": 0, "final": {"a": 70.0}, "baselines": {"raw_pixels": {"a": 50.0}}},
        {"seed": 1, "final": {"a": 74.0}, "baselines": {"raw_pixels": {"a": 52.0}}}]
  assert seeds.seed_table(rs).splitlines()[-1] == "| mean (std), 2 seeds | 72.00 (2.83) |"
  assert seeds.mean_result(rs) == {"final": {"a": 72.0}, "num_seeds": 2, "final_std": {"a": pytest.approx(2.828427)},
                                   "baselines": {"raw_pixels": {"a": 51.0}}, "health": {"ok": True, "checks": []}}


def test_a_flagged_seed_is_marked_and_left_out_of_the_healthy_mean():
  bad = {"ok": False, "checks": ["supcon_constant"], "flags": []}
  rs = [{"seed": 0, "final": {"a": 70.0}}, {"seed": 1, "final": {"a": 74.0}, "health": bad},
        {"seed": 2, "final": {"a": 72.0}, "health": {"ok": True, "checks": [], "flags": []}}]
  table = seeds.seed_table(rs).splitlines()
  assert "| 1† | 74.00 |" in table and "| 0 | 70.00 |" in table
  assert "| mean (std), 3 seeds | 72.00 (2.00) |" in table
  assert "| mean (std), the 2 healthy seeds | 71.00 (1.41) |" in table
  assert table[-1] == "† seed 1: supcon_constant"
  assert seeds.mean_result(rs)["health"] == {"ok": False, "checks": ["supcon_constant (seed 1)"]}
  assert baselines.comparison({"sd": seeds.mean_result(rs)}).splitlines()[1].startswith("sd†")


def test_seeds_mode_auto_runs_the_seeds_one_after_another_on_every_backend(monkeypatch):
  pick = lambda mode: seeds.vmapped(tiny_config(seeds_mode=mode))
  assert (pick("vmap"), pick("sequential"), pick("auto")) == (True, False, False)  # this CPU
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert (pick("vmap"), pick("sequential"), pick("auto")) == (True, False, False)
  with pytest.raises(ConfigError, match="seeds_mode"):
    config_lib.validate(tiny_config(seeds_mode="parallel"))


def test_sequential_seeds_are_the_seeds_single_runs_with_one_table(tmp_path, monkeypatch):
  workdirs = []

  def fake_run(config, workdir, devices=None):
    workdirs.append(pathlib.Path(workdir).name)
    return {"seed": config.seed, "final": {"class_il": 70.0 + 4 * config.seed}}

  monkeypatch.setattr(train, "train_and_evaluate", fake_run)
  group = seeds.SeedGroup(tiny_config(**dict(BASE, seeds_mode="sequential"), seed=3, num_seeds=2), tmp_path)
  results = group.run()
  assert [r["seed"] for r in results] == [3, 4]
  assert workdirs == ["seed_0", "seed_1"]
  assert (tmp_path / "seeds.md").read_text().splitlines()[-1] == "| mean (std), 2 seeds | 84.00 (2.83) |"
