"""A method is one object: its rules, and that a new one is one class and one registry line."""

import pathlib

import numpy as np
import pytest

from lasp_jax import config_lib
from lasp_jax.errors import ConfigError
from lasp_jax.method import contrastive, pools, registry
from tests.conftest import Run, mlp_two_tasks


class ReplayOnly(contrastive.Co2L):
  """A toy method defined here: Co2L's replay without its distillation."""
  distills = False
  ird_weight = 0.0


class CurrentOnlyPool(contrastive.Co2L):
  """Another toy: Co2L whose pool is every other sample of the task, no memory (a method with its own pool)."""

  def pool(self, stream, memory, t, slot=None, state=None):
    own = pools.task_pool(stream, t, slot)
    half = pools.Batch(*[f[::2] for f in own])
    return half, len(half.index)


class FeatureDistance(contrastive.Co2L):
  """A toy with its own loss term: the mean squared distance of the current embeddings to the past model's, in
  place of IRD (one class, one registry line: the step, boundary and loop do not know it)."""

  def distillation(self, *, z_cur, z_past, dim_mask, temp_cur, temp_past, valid):
    import jax.numpy as jnp  # noqa: PLC0415
    rows = jnp.concatenate([valid, valid]).astype(z_cur.dtype)
    return jnp.sum(rows[:, None] * (z_cur - z_past) ** 2) / jnp.maximum(jnp.sum(rows), 1.0)


@pytest.fixture
def registered(monkeypatch):
  monkeypatch.setitem(registry.METHODS, "replay_only", ReplayOnly())
  monkeypatch.setitem(registry.METHODS, "half_pool", CurrentOnlyPool())
  monkeypatch.setitem(registry.METHODS, "feature_distance", FeatureDistance())


def test_the_published_methods_rules():
  m = {n: registry.get(n) for n in registry.FAMILIES["contrastive"]}
  assert [n for n in m if m[n].looks_ahead] == ["sd", "gm", "sd_gm"]
  assert [n for n in m if m[n].selective] == ["sd", "sd_gm"] and [n for n in m if m[n].modulates] == ["gm", "sd_gm"]
  assert {n: m[n].ird_weight for n in m} == {"co2l": 1.0, "sd": 5.0, "gm": 1.0, "sd_gm": 5.0, "finetune": 0.0,
                                            "joint": 0.0}
  assert [n for n in m if not m[n].distills] == ["finetune", "joint"] and [n for n in m if m[n].cumulative] == ["joint"]
  # preset=published: only the published R-MNIST SD command searches the memory (--onlypast)
  assert {n: m[n].published_srs_data for n in m if m[n].published_srs_data} == {"sd": {"domain": "onlypast"}}


def test_a_method_defined_in_a_test_file_trains_with_one_registry_line(registered, tmp_path):
  run = Run(mlp_two_tasks(method="replay_only", **{"eval.raw_pixels": False}), tmp_path / "replay")
  results = run.run()
  assert config_lib.ird_weight(run.config) == 0.0 and run.past is None and results["boundaries"] == []
  assert all(c["ird"] == 0.0 for c in results["curves"])
  pool, per_epoch = run.method.pool(run.stream, run.memory, 1)
  assert per_epoch == len(run.stream.train_indices(1)) + run.config.memory.size  # it replays
  assert not pool.is_current[-run.config.memory.size:].any()
  half = Run(mlp_two_tasks(method="half_pool", **{"eval.raw_pixels": False}), tmp_path / "half")
  results = half.run()
  n = len(half.stream.train_indices(0))
  assert [c for c in results["curves"] if c["task"] == 0][0]["supcon_const"] > 0
  assert half.method.pool(half.stream, half.memory, 0)[1] == (n + 1) // 2
  assert results["boundaries"] == [] and np.isfinite(results["final"]["class_il"])


def test_an_unknown_method_is_one_config_error(tmp_path):
  with pytest.raises(ConfigError, match="unknown method 'nope'"):
    Run(mlp_two_tasks(method="nope"), tmp_path)


def test_a_method_with_its_own_loss_term_trains_with_it(registered, tmp_path):
  config = mlp_two_tasks(method="feature_distance", **{"eval.raw_pixels": False})
  results = Run(config, tmp_path / "fd").run()
  co2l = Run(mlp_two_tasks(method="co2l", **{"eval.raw_pixels": False}), tmp_path / "co2l").run()
  later = [c for c in results["curves"] if c["task"] == 1]
  assert later and all(c["loss"] == pytest.approx(c["supcon"] + c["ird"], rel=1e-5) for c in later)  # weight 1
  # One epoch after the past model's snapshot the embeddings have moved little (measured 0.13), while IRD's
  # cross-entropy sits near log(2n - 1) = 4.84 for batches of 64 (Co2L's run: 4.29): the step ran the
  # method's own term, not IRD.
  assert all(0 < c["ird"] < 1.0 for c in later)
  assert all(c["ird"] > 3.0 for c in co2l["curves"] if c["task"] == 1)
  assert results["boundaries"] == [] and np.isfinite(results["final"]["class_il"])


class DistilOnlyAtOddTasks(contrastive.GM):
  """A toy with its own boundary behaviour: looks ahead like GM but takes the salience only before odd tasks."""

  def take_lookahead(self, rs, state, res, *, task: int):
    return super().take_lookahead(rs, state, res, task=task) if task % 2 else state


def test_a_method_with_its_own_boundary_behaviour_needs_no_other_module(tmp_path, monkeypatch):
  """The boundary asks the method (Method.at_boundary): a new rule there is one class and one registry line."""
  from lasp_jax.method import lookahead, modulation  # noqa: PLC0415
  monkeypatch.setitem(registry.METHODS, "odd_gm", DistilOnlyAtOddTasks())
  over = {"data.num_tasks": 3, "data.scenario": "domain", "eval.raw_pixels": False}
  run = Run(mlp_two_tasks(method="odd_gm", **over), tmp_path)
  results = run.run()
  assert [b["task"] for b in results["boundaries"]] == [1, 2]  # it looked ahead at both boundaries
  held = lookahead.gamma_by_layer(modulation.get_salience(run.state.opt_state))
  # The salience of task 1's boundary (an odd task) is the one the optimizer holds: task 2's was not taken.
  first, second = (b["gamma_by_layer"] for b in results["boundaries"])
  assert held == first and held != second


def test_the_registrys_traits_are_each_methods_own():
  """The config check reads registry.traits (no jax); every method's class says the same."""
  for name in registry.METHODS:
    method = registry.get(name)
    assert registry.traits(name) == {k: getattr(method, k) for k in registry.DEFAULT_TRAITS}, name


def test_a_valid_config_is_checked_without_loading_jax():
  import subprocess  # noqa: PLC0415
  import sys  # noqa: PLC0415
  script = ("import sys\nfrom configs import seq_mnist\nfrom lasp_jax import config_lib\n"
            "c = config_lib.override(seq_mnist.get_config(), method='icarl')\n"
            "config_lib.validate(config_lib.resolved(c))\nprint('jax' in sys.modules)\n")
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       cwd=pathlib.Path(__file__).resolve().parents[1])
  assert out.stdout.split() == ["False"], out.stderr
