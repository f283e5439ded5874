"""--config.num_seeds=N: seeds trained as one vmapped program equal separate runs, and resume together."""

import json

import numpy as np
import pytest

from lasp_jax import seeds, train
from tests.conftest import tiny_config

BASE = {"data.num_tasks": 2, "method": "sd", "progress": False, "train.epochs_first": 1, "train.epochs": 1}


def test_vmapped_seeds_equal_separate_runs_and_resume_after_a_crash_between_seeds(tmp_path, monkeypatch):
  # First attempt dies after seed 0 saved task 0 and before seed 1 did: seed 1 is one task behind.
  real_after = train.ContinualRun.after_task
  calls = []

  def crash_on_second(self, t):
    calls.append((self.config.seed, t))
    if len(calls) == 2:
      raise KeyboardInterrupt("killed between the seeds' task-end checkpoints")
    real_after(self, t)

  monkeypatch.setattr(train.ContinualRun, "after_task", crash_on_second)
  group_dir = tmp_path / "group"
  with pytest.raises(KeyboardInterrupt):
    seeds.SeedGroup(tiny_config(**BASE, num_seeds=2), group_dir).run()
  monkeypatch.setattr(train.ContinualRun, "after_task", real_after)
  group = seeds.SeedGroup(tiny_config(**BASE, num_seeds=2), group_dir)
  assert [r.config.seed for r in group.runs] == [0, 1]
  results = group.run()

  single = train.ContinualRun(tiny_config(**BASE, seed=1), tmp_path / "single").run()
  assert results[1]["config_hash"] == single["config_hash"]  # seed k of a group is the single run of seed k
  assert results[1]["final"] == single["final"]
  assert results[1]["acc_matrix"] == single["acc_matrix"]
  loss = lambda r: [c["loss"] for c in r["curves"]]
  np.testing.assert_allclose(loss(results[1]), loss(single), rtol=1e-5)
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
  assert seeds.mean_result(rs) == {"final": {"a": 72.0}, "baselines": {"raw_pixels": {"a": 51.0}}}
