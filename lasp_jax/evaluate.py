"""Evaluators: what a run measures after a task, chosen by ``config.eval`` (big_vision's ``config.evals`` idea).

``eval.probe`` names the read-out of the frozen encoder: ``sgd`` (the published linear probe) or ``lbfgs``
(a converged logistic regression); ``eval.raw_pixels`` adds the same converged classifier on raw pixels after
the last task. Every read-out trains on the probe data of :func:`probe_data` and tests on every seen task.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax import pools, probe


def probe_config(config) -> probe.ProbeConfig:
  e = config.eval
  return probe.ProbeConfig(epochs=e.epochs, lr=e.lr, batch_size=e.batch_size, augment=e.augment,
                           select_best_on_test=e.select_best_on_test, standardize=e.standardize,
                           decay_epochs=tuple(e.get("decay_epochs", ())))


def probe_data(run, t: int) -> probe.ProbeData:
  """Task t's data + the memory for training (balanced over the stream's groups), every seen task's test set;
  padded to shapes that do not change from task to task (one program)."""
  s, mem = run.stream, run.memory
  pool = pools.training_pool(s, mem, t)
  labels = s.train_labels[pool.index]
  group = s.probe_groups(pool.domain, labels)
  weight = (1.0 / np.bincount(group)[group]).astype(np.float32)
  rows = max(len(s.train_indices(j)) for j in range(s.num_tasks)) + run.config.memory.size
  pad = lambda a, v=0: np.concatenate([a, np.full(rows - len(a), v, a.dtype)])
  test_idx, test_task, test_dom, test_rows = s.probe_tests(t)
  tpad = lambda a, v: np.concatenate([a, np.full(test_rows - len(a), v, np.int64)])
  test_idx, test_dom = tpad(test_idx, 0), tpad(test_dom, 0)
  feats = probe.extract_features(run.model, run.state.variables(), run.test_data, test_idx, test_dom, run.aug_cfg)
  return probe.ProbeData(jnp.asarray(pad(pool.index)), jnp.asarray(pad(pool.domain)), jnp.asarray(pad(labels)),
                         jnp.asarray(pad(weight)), jnp.asarray(pad(pool.is_current)), feats,
                         jnp.asarray(s.test_labels[test_idx]), jnp.asarray(tpad(test_task, s.num_tasks), jnp.int32),
                         jnp.asarray(test_idx, jnp.int32), jnp.asarray(test_dom, jnp.int32))


def readout_kwargs(run) -> dict:
  """The stream's settings that every read-out (SGD probe, L-BFGS, raw pixels) takes."""
  return dict(aug_cfg=run.aug_cfg, layout=probe.Layout.of(run.stream))


def sgd_probe(run, t: int, pd: probe.ProbeData) -> probe.ProbeResult:
  key = jax.random.fold_in(jax.random.PRNGKey(run.config.seed), 104729 + t)
  return probe.run_probe(key, run.model, run.state.variables(), run.data, pd, cfg=probe_config(run.config),
                         **readout_kwargs(run))


def lbfgs_readout(run, t: int, pd: probe.ProbeData, kind: str = "encoder") -> probe.ProbeResult:
  del t
  return probe.linear_readout(run.model, run.state.variables(), run.data, run.test_data, pd, kind=kind,
                              **readout_kwargs(run))


EVALUATORS = {"sgd": sgd_probe, "lbfgs": lbfgs_readout}


def raw_pixels(run, t: int, pd: probe.ProbeData) -> dict:
  """The converged linear classifier on raw pixels, on the probe's rows: the no-representation baseline."""
  return lbfgs_readout(run, t, pd, kind="pixels").overall
