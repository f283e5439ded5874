"""Domain-IL (Rotated MNIST) details: contrastive labels, the memory's rotations, the probe's weights, and
which rows each look-ahead setting searches."""

import numpy as np
import pytest

from lasp_jax.eval import evaluators
from lasp_jax.loop import run_state
from lasp_jax.method import contrastive, lookahead, pools
from tests.conftest import Run, tiny_config

# Asserts outcomes of training: CI checks it under a second XLA:CPU code path too (.ci/run).
pytestmark = pytest.mark.trajectory


def _run(tmp_path, **overrides):
  config = tiny_config(**{"data.scenario": "domain", "data.num_tasks": 3, "data.train_per_class": 20,
                          "memory.size": 60, "model.normalize_embedding": False, "train.lr": 0.01, **overrides})
  return Run(config, tmp_path)


def test_contrastive_labels_are_digit_plus_ten_times_domain(tmp_path):
  run = _run(tmp_path)
  cfg = run.loss_cfg
  assert cfg.domain_classes == 10
  labels, domain = np.array([3, 3, 7, 0]), np.array([0, 2, 1, 2])
  np.testing.assert_array_equal(contrastive.contrastive_labels(labels, domain, cfg), [3, 23, 17, 20])


def test_memory_samples_keep_their_own_tasks_rotation_and_the_probe_balances_domains(tmp_path):
  run = _run(tmp_path)
  run.rs.progress.task = 2
  for t in (1, 2):  # the boundaries' memory updates alone
    run.rs.memory = run_state.MemoryRecord.of(run.stream.update_memory(run.memory, task=t, capacity=60, seed=0))
  mem = run.memory
  assert set(np.unique(mem.tasks)) == {0, 1}  # both earlier domains are in the memory
  pool = pools.training_pool(run.stream, mem, 2)
  n_task = len(run.stream.train_indices(2))
  # The task's own rows are at domain 2 and current; the memory's at the domain each sample was stored from.
  np.testing.assert_array_equal(pool.domain[:n_task], 2)
  np.testing.assert_array_equal(pool.domain[n_task:], mem.tasks)
  assert pool.is_current[:n_task].all() and not pool.is_current[n_task:].any()
  angles = np.asarray(run.data.angles)
  assert len(set(angles[pool.domain].round(6))) == 3  # three rotations in one training pool
  pd = evaluators.probe_data(run.readout_inputs(), 2)
  weight, domain = np.asarray(pd.train_weight), np.asarray(pd.train_domain)
  real = weight > 0
  per_domain = [weight[real & (domain == d)].sum() for d in range(3)]
  np.testing.assert_allclose(per_domain, per_domain[0], rtol=1e-5)  # every domain weighs the same in the probe


@pytest.mark.parametrize("srs", ["onlycurrent", "onlypast", "combined"])
def test_each_lookahead_setting_selects_its_rows(tmp_path, srs):
  run = _run(tmp_path)
  mem = run.stream.update_memory(run.memory, task=1, capacity=60, seed=0)
  pool, mem_pool = pools.training_pool(run.stream, mem, 1), pools.memory_pool(run.stream, mem)
  rows = lookahead.lookahead_rows(pool, mem_pool, srs, 64, np.random.default_rng(0))
  valid = rows.valid.astype(bool)
  current, domains = rows.is_current[valid].astype(bool), rows.domain[valid]
  if srs == "onlycurrent":
    assert len(rows.index) == 64 and current.all() and (domains == 1).all()
  elif srs == "onlypast":
    assert valid.sum() == 60 and not current.any() and (domains == 0).all()  # the whole memory (60 < 64)
    assert set(rows.index[valid]) == set(mem.indices)
  else:
    assert len(rows.index) == 128 and current[:valid[:64].sum()].all() and not current[valid[:64].sum():].any()
