"""Evaluators: what a run measures after a task, chosen by ``config.eval`` (big_vision's ``config.evals`` idea).

``eval.probe`` names the read-out of the frozen encoder: ``sgd`` (the published linear probe) or ``lbfgs``
(a converged logistic regression); ``eval.raw_pixels`` adds the same converged classifier on raw pixels after
the last task. Every read-out trains on the probe data of :func:`probe_data` and tests on every seen task;
``eval.final_readouts`` adds read-outs after the last task, and ``data.validation_per_class`` scores each on
held-out training digits too (:func:`final_readouts`).

An evaluator takes :class:`Inputs`, the values a read-out needs (the model and its variables, the device data,
the stream and the memory, the read-out's settings), never the run that holds them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax.eval import probe
from lasp_jax.method import buffer, pools
from lasp_jax.model import models
from lasp_jax.platform.numerics import l2_normalize


@dataclasses.dataclass(frozen=True)
class Inputs:
  """What every read-out after task t reads: the encoder (model, variables), the training and test images on the
  device, the stream and replay memory, the probe's settings; ``validation``: (stream, device data) of the
  held-out digits, or None."""
  model: Any
  variables: Any
  data: Any                 # steps.DeviceData of the training images (the probe trains on them)
  test_data: Any            # steps.DeviceData of the test images
  stream: Any
  memory: Any
  aug_cfg: Any
  config: Any               # the run's config: eval.*, memory.size, seed
  validation: Optional[tuple] = None
  method_memory: Any = None  # the method's device memory (train state): iCaRL's exemplars

  @property
  def layout(self) -> probe.Layout:
    return probe.Layout.of(self.stream)


def probe_config(config) -> probe.ProbeConfig:
  e = config.eval
  return probe.ProbeConfig(epochs=e.epochs, lr=e.lr, batch_size=e.batch_size, augment=e.augment,
                           select_best_on_test=e.select_best_on_test, standardize=e.standardize,
                           decay_epochs=tuple(e.get("decay_epochs", ())))


def probe_data(x: Inputs, t: int, held=None) -> probe.ProbeData:
  """Task t's data + the memory for training (balanced over the stream's groups), every seen task's test set;
  padded to shapes that do not change from task to task (one program). ``held``: (stream, device data) of the
  rows it tests on instead of the test images (the validation set, ``x.validation``)."""
  s, mem = x.stream, x.memory
  tests, test_data = held or (s, x.test_data)
  pool = pools.training_pool(s, mem, t)
  labels = s.train_labels[pool.index]
  group = s.probe_groups(pool.domain, labels)
  weight = (1.0 / np.bincount(group)[group]).astype(np.float32)
  rows = max(len(s.train_indices(j)) for j in range(s.num_tasks)) + x.config.memory.size
  pad = lambda a, v=0: np.concatenate([a, np.full(rows - len(a), v, a.dtype)])
  test_idx, test_task, test_dom, test_rows = tests.probe_tests(t)
  tpad = lambda a, v: np.concatenate([a, np.full(test_rows - len(a), v, np.int64)])
  test_idx, test_dom = tpad(test_idx, 0), tpad(test_dom, 0)
  feats = probe.extract_features(x.model, x.variables, test_data, test_idx, test_dom, x.aug_cfg)
  return probe.ProbeData(jnp.asarray(pad(pool.index)), jnp.asarray(pad(pool.domain)), jnp.asarray(pad(labels)),
                         jnp.asarray(pad(weight)), jnp.asarray(pad(pool.is_current)), feats,
                         jnp.asarray(tests.test_labels[test_idx]),
                         jnp.asarray(tpad(test_task, s.num_tasks), jnp.int32),
                         jnp.asarray(test_idx, jnp.int32), jnp.asarray(test_dom, jnp.int32))


def readout_kwargs(x: Inputs) -> dict:
  """The stream's settings that every read-out (SGD probe, L-BFGS, raw pixels) takes."""
  return dict(aug_cfg=x.aug_cfg, layout=x.layout)


def sgd_probe(x: Inputs, t: int, pd: probe.ProbeData) -> probe.ProbeResult:
  key = jax.random.fold_in(jax.random.PRNGKey(x.config.seed), 104729 + t)
  return probe.run_probe(key, x.model, x.variables, x.data, pd, cfg=probe_config(x.config), **readout_kwargs(x))


def lbfgs_readout(x: Inputs, t: int, pd: probe.ProbeData, kind: str = "encoder") -> probe.ProbeResult:
  del t
  return probe.linear_readout(x.model, x.variables, x.data, x.test_data, pd, kind=kind, **readout_kwargs(x))


def head_readout(x: Inputs, t: int, pd: probe.ProbeData) -> probe.ProbeResult:
  """The model's own classifier on the test rows' features (the cross-entropy family's read-out)."""
  del t
  logits = _classify(x.model, x.variables, pd.test_feats)
  return probe.scores(logits, pd, x.layout)


@functools.partial(jax.jit, static_argnames=("model",))
def _classify(model, variables, feats):
  return model.apply(variables, feats, method=models.Model.classify)


def nme_readout(x: Inputs, t: int, pd: probe.ProbeData, normalize: bool = True) -> probe.ProbeResult:
  """Nearest mean of exemplars (iCaRL) over the memory's exemplars (``nme_logits``)."""
  del t
  mem = x.method_memory
  n = int(buffer.filled(mem))
  feats = probe.extract_features(x.model, x.variables, x.data, np.asarray(mem.index)[:n], np.asarray(mem.domain)[:n],
                                 x.aug_cfg)
  logits = nme_logits(feats, jnp.asarray(np.asarray(mem.label)[:n]), pd.test_feats, x.layout.num_classes, normalize)
  return probe.scores(logits, pd, x.layout)


def nme_logits(feats, labels, test_feats, num_classes: int, normalize: bool = True):
  """Minus each test row's distances to the class means: of the exemplars' L2-normalized ``feats``, renormalized;
  ``normalize=False`` (``nme_raw``): the raw features' plain means and distances, as the DER paper's code read iCaRL
  out. A class with no exemplar has no mean and is never chosen."""
  norm = l2_normalize if normalize else lambda a: a
  onehot = jax.nn.one_hot(labels, num_classes)
  counts, sums = jnp.sum(onehot, 0), onehot.T @ norm(feats)
  means = l2_normalize(sums) if normalize else sums / jnp.maximum(counts, 1.0)[:, None]
  dist = jnp.linalg.norm(norm(test_feats)[:, None, :] - means[None, :, :], axis=-1)
  return jnp.where(counts[None, :] > 0, -dist, -jnp.inf)


EVALUATORS = {"sgd": sgd_probe, "lbfgs": lbfgs_readout, "head": head_readout, "nme": nme_readout,
              "nme_raw": functools.partial(nme_readout, normalize=False)}


def raw_pixels(x: Inputs, t: int, pd: probe.ProbeData) -> dict:
  """The converged linear classifier on raw pixels, on the probe's rows: the no-representation baseline."""
  return lbfgs_readout(x, t, pd, kind="pixels").overall


def summary(res: probe.ProbeResult, t: int) -> dict:
  """A read-out's figures after task t: over every seen task's rows, and on task t's own rows."""
  return {"overall": dict(res.overall), "last_task": {n: float(row[t]) for n, row in res.per_task.items()}}


def final_readouts(x: Inputs, t: int, pd: probe.ProbeData, main: str) -> tuple[dict, dict]:
  """After the last task: each of ``eval.final_readouts`` on the test images beside the run's read-out ``main``
  (``pd``), and, with a validation set, ``main`` and each of them on the validation images. Both {name: summary}.

  The validation figures come from the same read-outs fit on the same training rows; only the rows they are
  scored on differ, so a setting chosen on them never saw a test image.
  """
  probe_name, names = main, tuple(dict.fromkeys(x.config.eval.final_readouts))
  test = {n: summary(EVALUATORS[n](x, t, pd), t) for n in names if n != probe_name}
  validation = {}
  if x.validation is not None:
    vpd = probe_data(x, t, held=x.validation)
    validation = {n: summary(EVALUATORS[n](x, t, vpd), t) for n in dict.fromkeys((probe_name, *names))}
  return test, validation
