"""Metrics against hand-computed matrices, Task-IL masking, and the SGD probe's switches."""

import dataclasses
import functools
import warnings

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lasp_jax import config_lib, progress
from lasp_jax.data import augment
from lasp_jax.eval import evaluators, linear, metrics, probe
from tests.conftest import Run, init, tiny_config

# One xdist worker for this module (`--dist loadgroup`): its module fixture, a training run, is then built once.
pytestmark = [pytest.mark.xdist_group("metrics_probe"), pytest.mark.trajectory]

NAN = np.nan


def test_forgetting_and_bwt_hand_values():
  a = np.array([[90.0, NAN, NAN],
                [70.0, 80.0, NAN],
                [60.0, 85.0, 75.0]])
  # forgetting: task 0: max(90, 70) - 60 = 30; task 1: max(80) - 85 = -5 -> mean 12.5
  assert metrics.forgetting(a) == pytest.approx(12.5)
  # BWT: (60 - 90 + 85 - 80) / 2 = -12.5
  assert metrics.backward_transfer(a) == pytest.approx(-12.5)
  assert metrics.average_accuracy(a) == pytest.approx(220 / 3)
  last_only = np.array([[NAN, NAN], [50.0, 60.0]])
  assert metrics.forgetting(last_only) is None and metrics.backward_transfer(last_only) is None


def test_average_accuracy_before_the_last_tasks_probe_is_nan_without_a_warning():
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # numpy's "Mean of empty slice" would fail here
    assert np.isnan(metrics.average_accuracy(np.array([[80.0, NAN], [NAN, NAN]])))


def test_task_il_masks_to_the_samples_task_block():
  # 2 tasks x 2 classes. Logits favour class 3 everywhere; Task-IL may only pick within the label's block.
  logits = jnp.array([[1.0, 0.5, 0.0, 9.0],    # label 0: Class-IL wrong (3), Task-IL right (0 > 1)
                      [0.2, 0.1, 0.0, 9.0],    # label 1: Task-IL wrong (0 > 1)
                      [0.0, 0.0, 1.0, 9.0],    # label 2: Task-IL wrong (3 > 2)
                      [0.0, 0.0, 0.0, 9.0]])   # label 3: both right
  labels = jnp.array([0, 1, 2, 3])
  tasks = jnp.array([0, 0, 1, 1])
  acc = probe._accuracies(logits, labels, tasks, probe.Layout(4, 2, 2, ("class_il", "task_il")))
  np.testing.assert_allclose(acc["class_il"][0], [0.0, 50.0])
  np.testing.assert_allclose(acc["task_il"][0], [50.0, 50.0])
  assert float(acc["class_il"][1]) == pytest.approx(25.0) and float(acc["task_il"][1]) == pytest.approx(50.0)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
  # Standardized features at lr 0.1: the tiny network's raw features leave 4 epochs at lr 1 at chance. The
  # tests' probe of these settings is then the program the run compiled. No raw-pixel fit: no test reads it.
  config = tiny_config(**{"data.num_tasks": 2, "eval.probe": "sgd", "eval.epochs": 4, "eval.standardize": True,
                          "eval.lr": 0.1, "eval.raw_pixels": False})
  run = Run(config, tmp_path_factory.mktemp("probe"))
  run.run()
  return run


def _probe(run, **changes):
  cfg = dataclasses.replace(evaluators.probe_config(run.config), **changes)
  inputs = run.readout_inputs()
  return probe.run_probe(jax.random.PRNGKey(0), run.model, run.state.variables(), run.data,
                         evaluators.probe_data(inputs, 1), cfg=cfg, **evaluators.readout_kwargs(inputs))


@pytest.mark.parametrize("overall, best_epoch", [([55.0, 85.0, 65.0, 75.0], 1), ([55.0, 85.0, 65.0, 85.0], 1),
                                                  ([55.0, 60.0, 65.0, 75.0], 3)],
                         ids=["peak_before_last", "tie_goes_to_the_first", "peak_at_last"])
def test_select_best_on_test_takes_the_best_epoch(monkeypatch, overall, best_epoch):
  """The published switch returns the epoch of the highest overall test accuracy (the first of a tie), with that
  epoch's per-task row; the default the last epoch. A hand-made curve: no training trajectory decides the case."""
  per_task = np.array([[v - 1.0, v + 1.0] for v in overall])
  monkeypatch.setattr(probe, "probe_curves", lambda *a, **k: {"class_il": (per_task, np.array(overall))})
  run = lambda best: probe.run_probe(None, None, None, None, None, cfg=probe.ProbeConfig(
      epochs=len(overall), select_best_on_test=best))
  best, last = run(True), run(False)
  assert best.epoch["class_il"] == best_epoch and last.epoch["class_il"] == len(overall) - 1
  assert best.overall["class_il"] == overall[best_epoch] and last.overall["class_il"] == overall[-1]
  np.testing.assert_array_equal(best.per_task["class_il"], per_task[best_epoch])


def test_select_best_on_test_reads_the_trained_probes_curve(trained_run):
  """On a trained probe the switch returns the curve's maximum and its first epoch, the default its last epoch:
  properties of any trajectory (which epoch peaks differs between CPUs' floating-point paths)."""
  changes = dict(lr=3.0, augment=False)
  cfg = dataclasses.replace(evaluators.probe_config(trained_run.config), **changes)
  curves = probe.probe_curves(jax.random.PRNGKey(0), trained_run.model, trained_run.state.variables(),
                              trained_run.data, evaluators.probe_data(trained_run.readout_inputs(), 1), cfg=cfg,
                              **evaluators.readout_kwargs(trained_run.readout_inputs()))
  curve = curves["class_il"][1]
  best = _probe(trained_run, select_best_on_test=True, **changes)
  last = _probe(trained_run, **changes)
  assert best.epoch["class_il"] == int(np.argmax(curve)) and last.epoch["class_il"] == len(curve) - 1
  assert best.overall["class_il"] == pytest.approx(float(curve.max()))
  assert last.overall["class_il"] == pytest.approx(float(curve[-1]))
  assert last.overall["class_il"] <= best.overall["class_il"]


def test_augmenting_probe_differs_from_cached_features_and_learns(trained_run):
  cached = _probe(trained_run, augment=False)
  augmented = _probe(trained_run, augment=True)
  assert augmented.overall["class_il"] != cached.overall["class_il"]  # it did re-augment
  assert augmented.overall["task_il"] > 60  # and still learned (2 tasks of 2 digits: chance 50)


def test_standardized_probe_converges_closer_to_the_lbfgs_readout(trained_run):
  ref = probe.linear_readout(trained_run.model, trained_run.state.variables(), trained_run.data,
                             trained_run.test_data, evaluators.probe_data(trained_run.readout_inputs(), 1),
                             kind="encoder", **evaluators.readout_kwargs(trained_run.readout_inputs()))
  std = _probe(trained_run, epochs=30)
  assert abs(std.overall["class_il"] - ref.overall["class_il"]) < 10


def test_lbfgs_readout_reads_the_probe_datas_test_features_and_equals_extracting_them_again(trained_run,
                                                                                             monkeypatch):
  """The encoder's test features come from the probe data (extracted once); re-extracted they give the same
  read-out. The raw-pixel read-out, another kind, extracts its own."""
  run, pd = trained_run, evaluators.probe_data(trained_run.readout_inputs(), 1)
  readout = lambda pd, kind: probe.linear_readout(run.model, run.state.variables(), run.data, run.test_data, pd,
                                                  kind=kind, **evaluators.readout_kwargs(run.readout_inputs()))
  fresh = probe.extract_features(run.model, run.state.variables(), run.test_data, np.asarray(pd.test_index),
                                 np.asarray(pd.test_domain), run.aug_cfg)
  np.testing.assert_array_equal(fresh, pd.test_feats)
  extracted, real = [], probe.extract_features
  monkeypatch.setattr(probe, "extract_features", lambda m, v, data, *a, **k: extracted.append(
      (data is run.test_data, k.get("kind"))) or real(m, v, data, *a, **k))
  got = readout(pd, "encoder")
  assert extracted == [(False, "encoder")]  # the training rows only
  # Given other test features, the read-out scores those: it reads them from the probe data.
  shuffled = readout(pd._replace(test_feats=pd.test_feats[::-1]), "encoder")
  assert shuffled.overall != got.overall
  readout(pd, "pixels")
  assert extracted[-2:] == [(False, "pixels"), (True, "pixels")]


def test_rotated_mnist_probe_crops_only_the_memory():
  """Published R-MNIST probe: current-task images are rotated only, memory images rotated and cropped."""
  cfg = config_lib.augment_config(tiny_config(**{"data.scenario": "domain", "augment.crop_scale": (0.3, 0.5)}),
                                  rotate=True)
  images = jnp.asarray(np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1)), jnp.uint8)
  angles = jnp.array([30.0, 30.0, 60.0, 60.0])
  current = jnp.array([True, False, True, False])
  views = jax.jit(functools.partial(probe.probe_views, aug_cfg=cfg), static_argnames="crop_current")  # as the probe
  x = views(jax.random.PRNGKey(1), images, angles, current, crop_current=False)
  plain = jax.jit(lambda i, a: augment.test_transform(i, a, cfg))(images, angles)
  np.testing.assert_array_equal(x[current], plain[current])
  assert not np.allclose(x[~current], plain[~current])  # cropped to 30-50 % of the area
  every = views(jax.random.PRNGKey(1), images, angles, current, crop_current=True)
  assert not np.allclose(every[current], plain[current])


def test_probe_step_without_real_rows_moves_nothing_and_padding_rows_do_not_count():
  clf = probe.Linear(3)
  tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.5, momentum=0.9)
  rng = np.random.default_rng(0)
  feats, labels = jnp.asarray(rng.normal(size=(8, 4)), jnp.float32), jnp.asarray(rng.integers(0, 3, 8))
  params = init(clf, feats)
  step = jax.jit(functools.partial(probe.masked_sgd_step, clf=clf, tx=tx))  # compiled, as inside the probe's loop
  # One real step first, so the momentum buffer is non-zero (a plain SGD update would move the weights again).
  params, opt = step(params, tx.init(params), feats, labels, jnp.ones(8, bool))
  assert float(sum(jnp.abs(x).sum() for x in jax.tree.leaves(opt.inner_state))) > 0
  none = jnp.zeros(8, bool)
  same_p, same_o = step(params, opt, feats, labels, none)
  chex.assert_trees_all_equal((same_p, same_o), (params, opt))
  # Half the rows valid: the same step as on those rows alone.
  half = jnp.arange(8) < 4
  got = step(params, opt, feats, labels, half)
  want = step(params, opt, feats[:4], labels[:4], jnp.ones(4, bool))
  chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-7)


def test_the_probe_and_the_linear_fit_advance_their_progress_bars(trained_run, monkeypatch):
  monkeypatch.setattr(progress, "DELAY", 0.0)
  progress.enable(True)
  bars = []
  make = progress.bar
  monkeypatch.setattr(progress, "bar", lambda *a, **k: bars.append(make(*a, **k)) or bars[-1])
  _probe(trained_run)
  assert bars[-1].total == 4 and bars[-1].n == 4  # one tick per probe epoch, from inside the compiled loop
  rng = np.random.default_rng(0)
  linear.fit_logistic(rng.standard_normal((40, 3)) + 0.1, rng.integers(0, 2, 40), num_classes=2, l2=0.123)
  assert bars[-1].desc.startswith("linear fit") and 0 < bars[-1].n <= bars[-1].total
  progress.enable(False)


def test_an_accuracy_matrix_prints_only_its_measured_rows():
  a = np.full((3, 3), np.nan)
  a[2] = [90.0, 80.0, 70.0]
  lines = metrics.format_matrix("domain_il", a).splitlines()
  assert len(lines) == 2 and lines[1].startswith("  after T2") and "70.00" in lines[1]
