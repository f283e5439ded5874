"""Evaluators: what a run measures after a task, chosen by ``config.eval`` (big_vision's ``config.evals`` idea).

``eval.probe`` names the read-out of the frozen encoder: ``sgd`` (the published linear probe) or ``lbfgs``
(a converged logistic regression); ``eval.raw_pixels`` adds the same converged classifier on raw pixels after
the last task. Every read-out trains on the probe data of :func:`probe_data` and tests on every seen task;
``eval.final_readouts`` adds read-outs after the last task, and ``data.validation_per_class`` scores each on
held-out training digits too (:func:`final_readouts`).
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


def probe_data(run, t: int, held=None) -> probe.ProbeData:
  """Task t's data + the memory for training (balanced over the stream's groups), every seen task's test set;
  padded to shapes that do not change from task to task (one program). ``held``: (stream, device data) of the
  rows it tests on instead of the test images (the validation set, ``run.validation``)."""
  s, mem = run.stream, run.memory
  tests, test_data = held or (s, run.test_data)
  pool = pools.training_pool(s, mem, t)
  labels = s.train_labels[pool.index]
  group = s.probe_groups(pool.domain, labels)
  weight = (1.0 / np.bincount(group)[group]).astype(np.float32)
  rows = max(len(s.train_indices(j)) for j in range(s.num_tasks)) + run.config.memory.size
  pad = lambda a, v=0: np.concatenate([a, np.full(rows - len(a), v, a.dtype)])
  test_idx, test_task, test_dom, test_rows = tests.probe_tests(t)
  tpad = lambda a, v: np.concatenate([a, np.full(test_rows - len(a), v, np.int64)])
  test_idx, test_dom = tpad(test_idx, 0), tpad(test_dom, 0)
  feats = probe.extract_features(run.model, run.state.variables(), test_data, test_idx, test_dom, run.aug_cfg)
  return probe.ProbeData(jnp.asarray(pad(pool.index)), jnp.asarray(pad(pool.domain)), jnp.asarray(pad(labels)),
                         jnp.asarray(pad(weight)), jnp.asarray(pad(pool.is_current)), feats,
                         jnp.asarray(tests.test_labels[test_idx]),
                         jnp.asarray(tpad(test_task, s.num_tasks), jnp.int32),
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


def summary(res: probe.ProbeResult, t: int) -> dict:
  """A read-out's figures after task t: over every seen task's rows, and on task t's own rows."""
  return {"overall": dict(res.overall), "last_task": {n: float(row[t]) for n, row in res.per_task.items()}}


def final_readouts(run, t: int, pd: probe.ProbeData) -> tuple[dict, dict]:
  """After the last task: each of ``eval.final_readouts`` on the test images beside ``eval.probe``'s (``pd``),
  and, with a validation set, ``eval.probe`` and each of them on the validation images. Both {name: summary}.

  The validation figures come from the same read-outs fit on the same training rows; only the rows they are
  scored on differ, so a setting chosen on them never saw a test image.
  """
  names = tuple(dict.fromkeys(run.config.eval.final_readouts))
  test = {n: summary(EVALUATORS[n](run, t, pd), t) for n in names if n != run.config.eval.probe}
  validation = {}
  if run.validation is not None:
    vpd = probe_data(run, t, held=run.validation)
    validation = {n: summary(EVALUATORS[n](run, t, vpd), t) for n in dict.fromkeys((run.config.eval.probe, *names))}
  return test, validation
