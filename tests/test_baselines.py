"""Baselines (finetune, joint, raw pixels), the converged readout, schedules, and that every task trains."""

import pathlib

import jax
import numpy as np
import pytest

from configs import tinyimagenet
from experiments import raw_pixels
from lasp_jax import config_lib
from lasp_jax.data import streams
from lasp_jax.errors import ConfigError
from lasp_jax.eval import health, linear
from lasp_jax.loop.train_state import lr_schedule, schedule_values
from tests.conftest import Run, mlp_two_tasks, tiny_config, two_tasks

REPO = pathlib.Path(__file__).resolve().parents[1]

# One xdist worker for this module (`--dist loadgroup`): its module fixture, a training run, is then built once.
pytestmark = [pytest.mark.xdist_group("baselines"), pytest.mark.trajectory]

# For tests that check training only: one probe after the last task, no raw-pixel fit.
NO_READOUT = {"eval.every_task": False, "eval.raw_pixels": False}


# ----------------------------------------------------------------------------- the converged readout

def _gaussians(rng, n_per_class, means, sd=1.0):
  x = np.concatenate([rng.normal(m, sd, (n_per_class, len(m))) for m in means])
  return x, np.repeat(np.arange(len(means)), n_per_class)


def test_logistic_regression_is_at_its_optimum():
  rng = np.random.default_rng(0)
  x, y = _gaussians(rng, 200, [(0, 0, 0), (3, 0, 0), (0, 3, 0)])
  x = x * np.array([1000.0, 1.0, 1e-3])  # wildly different scales: standardization must absorb them
  w = rng.uniform(0.5, 2.0, len(y))
  clf = linear.fit_logistic(x, y, num_classes=3, sample_weight=w, l2=1e-2)
  xs = (x - clf.mean) / clf.scale
  p = np.exp(clf.logits(x) - clf.logits(x).max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  d = (w / w.sum())[:, None] * (p - np.eye(3)[y])
  np.testing.assert_allclose(xs.T @ d + 1e-2 * clf.weight, 0, atol=1e-5)  # stationary: gradient of the objective
  np.testing.assert_allclose(d.sum(0), 0, atol=1e-5)
  assert np.mean(np.argmax(clf.logits(x), 1) == y) > 0.9


def test_logistic_regression_reaches_the_bayes_rate():
  rng = np.random.default_rng(1)
  means = [(0.0, 0.0), (2.0, 0.0)]
  x, y = _gaussians(rng, 2000, means)
  xt, yt = _gaussians(rng, 20000, means)
  clf = linear.fit_logistic(x, y, num_classes=2)
  acc = np.mean(np.argmax(clf.logits(xt), 1) == yt)
  bayes = 0.8413  # Phi(1): the optimal boundary is x0 = 1
  assert abs(acc - bayes) < 0.01, acc


def test_zero_weight_rows_are_ignored():
  rng = np.random.default_rng(2)
  x, y = _gaussians(rng, 100, [(0, 0), (2, 2)])
  junk = rng.normal(50, 10, (30, 2))
  both = linear.fit_logistic(np.concatenate([x, junk]), np.concatenate([y, np.zeros(30, int)]), num_classes=2,
                             sample_weight=np.concatenate([np.ones(len(y)), np.zeros(30)]))
  alone = linear.fit_logistic(x, y, num_classes=2)
  np.testing.assert_allclose(both.logits(x), alone.logits(x), atol=1e-4)


def test_a_fit_of_identical_inputs_is_done_once(monkeypatch):
  calls = []
  fit = linear._fit_logistic  # pylint: disable=protected-access
  monkeypatch.setattr(linear, "_fit_logistic", lambda *a, **k: calls.append(1) or fit(*a, **k))
  rng = np.random.default_rng(3)
  x, y = _gaussians(rng, 50, [(0, 0), (2, 2)])
  first = linear.fit_logistic(x, y, num_classes=2)
  assert linear.fit_logistic(x.copy(), y.copy(), num_classes=2) is first and len(calls) == 1
  x[0, 0] += 1e-9  # any other input is fitted anew
  linear.fit_logistic(x, y, num_classes=2)
  linear.fit_logistic(x, y, num_classes=2, sample_weight=np.ones(len(y)))
  linear.fit_logistic(x, y, num_classes=2, l2=1e-2)
  assert len(calls) == 4


# ----------------------------------------------------------------------------- schedules

def test_published_epoch_cosine_hand_values():
  # 2 epochs of 2 steps, lr 1, floor 0.1: epoch 1 -> cos(pi/2) -> 0.55, epoch 2 -> cos(pi) -> the floor.
  lrs = schedule_values(lr_schedule(base_lr=1.0, epochs=2, steps_per_epoch=2, min_ratio=0.1), 4)
  np.testing.assert_allclose(lrs, [0.55, 0.55, 0.1, 0.1], rtol=1e-6)
  one = schedule_values(lr_schedule(base_lr=1.0, epochs=1, steps_per_epoch=3, min_ratio=0.1), 3)
  np.testing.assert_allclose(one, [0.1] * 3, rtol=1e-6)  # the published 1-epoch task: all at the floor
  assert health.lr_frozen(task=1, lrs=one, floor=0.1)


def test_step_cosine_hand_values_and_no_frozen_task():
  lrs = schedule_values(lr_schedule(base_lr=1.0, epochs=1, steps_per_epoch=4, min_ratio=0.1, kind="step_cosine"), 4)
  expected = [0.1 + 0.9 * (1 + np.cos(np.pi * s / 4)) / 2 for s in range(4)]
  np.testing.assert_allclose(lrs, expected, rtol=1e-6)
  assert lrs[0] == pytest.approx(1.0) and not health.lr_frozen(task=1, lrs=lrs, floor=0.1)


def test_warmup_targets_task_and_published():
  # 4 epochs of 1 step, warm-up 2 epochs from 0: target = cosine value at epoch 2 of 4 (task) or of 10 (published).
  task = schedule_values(lr_schedule(base_lr=1.0, epochs=4, steps_per_epoch=1, warmup_epochs=2, warmup_from=0.0,
                                     min_ratio=0.0), 4)
  pub = schedule_values(lr_schedule(base_lr=1.0, epochs=4, steps_per_epoch=1, warmup_epochs=2, warmup_from=0.0,
                                    warmup_target_epochs=10, min_ratio=0.0), 4)
  cos = lambda e, n: (1 + np.cos(np.pi * e / n)) / 2
  np.testing.assert_allclose(task, [0.0, cos(2, 4) / 2, cos(3, 4), cos(4, 4)], atol=1e-6)
  np.testing.assert_allclose(pub[:2], [0.0, cos(2, 10) / 2], atol=1e-6)


# ----------------------------------------------------------------------------- runs

def _param_change(a, b) -> float:
  diff = sum(float(np.sum((np.asarray(x) - np.asarray(y)) ** 2)) for x, y in zip(jax.tree.leaves(a),
                                                                                 jax.tree.leaves(b)))
  return np.sqrt(diff / sum(float(np.sum(np.asarray(y) ** 2)) for y in jax.tree.leaves(b)))


def test_a_frozen_last_task_is_warned_and_does_not_move_the_network(tmp_path, capsys):
  """The check above can fail: at the floor lr the last task leaves the network (almost) where it was,
  and the run says so for that task (not for task 0, which has 2 epochs)."""
  # The train program of test_train's 2-task Co2L run on the MLP (the schedule only changes its inputs). Measured:
  # the floor-lr steps move the weights by 9e-4; the same run under the per-step cosine by 0.15.
  run = Run(mlp_two_tasks(method="co2l", **{"train.schedule": "published_epoch_cosine", **NO_READOUT}), tmp_path)
  run.run()
  assert _param_change(run.state.params, run.past.params) < 5e-3
  err = capsys.readouterr().err
  assert "health: task 1: lr_frozen: trains entirely at the floor learning rate" in err
  assert "task 0: lr_frozen" not in err


@pytest.mark.parametrize("method", ["finetune", "joint"])
def test_baseline_methods(tmp_path, method):
  run = Run(tiny_config(method=method, **{"train.epochs_first": 1, "train.epochs": 1, **NO_READOUT}),
                           tmp_path)
  pools = []
  results = run.run()
  assert run.past is None and results["boundaries"] == []          # no distillation, no LASP work
  assert len(run.memory) == run.config.memory.size                    # the probe still sees the memory
  assert config_lib.ird_weight(run.config) == 0.0
  assert all(c["ird"] == 0.0 for c in results["curves"])
  for t in range(3):
    pool, per_epoch = run.method.pool(run.stream, run.memory, t)
    labels = run.stream.train_labels[pool.index]
    pools.append((set(np.unique(labels)), per_epoch, pool.is_current.all()))
  if method == "finetune":
    assert [p[0] for p in pools] == [{0, 1}, {2, 3}, {4, 5}] and all(p[2] for p in pools)
    assert pools[2][1] == len(run.stream.train_indices(2))
  else:  # every task so far, at the step budget of a replay method's epoch
    assert [p[0] for p in pools] == [{0, 1}, {0, 1, 2, 3}, {0, 1, 2, 3, 4, 5}] and all(p[2] for p in pools)
    assert pools[2][1] == len(run.stream.train_indices(2)) + run.config.memory.size


def test_explicit_rotation_angles(tmp_path):
  angles = (10.0, 95.5)
  config = tiny_config(**{"data.scenario": "domain", "data.num_tasks": 2, "data.rotation_angles": angles,
                          "model.normalize_embedding": False})
  _, stream = streams.load(config)
  np.testing.assert_allclose(stream.angles, angles)
  np.testing.assert_allclose(stream.test_angles, angles)
  with pytest.raises(ConfigError, match="data.rotation_angles has 1 angles for 2 tasks"):
    config_lib.validate(tiny_config(**{"data.scenario": "domain", "data.num_tasks": 2,
                                       "data.rotation_angles": (5.0,)}))


def test_tiny_imagenet_embedding_size_follows_the_method():
  sizes = {}
  for method in ("co2l", "sd", "gm", "sd_gm"):
    c = tinyimagenet.get_config()
    c.method = method
    sizes[method] = config_lib.resolved(c).model.embedding_dim
  assert sizes == {"co2l": 128, "sd": 512, "gm": 512, "sd_gm": 512}
  c = tinyimagenet.get_config()
  c.method, c.model.embedding_dim = "co2l", 64
  assert config_lib.resolved(c).model.embedding_dim == 64  # an explicit size wins


def test_a_task_whose_loss_does_not_fall_is_flagged(tmp_path, capsys):
  # lr 100 stays finite on the tiny net but trains to nothing in task 0: the run says so and records it.
  # The conv net: the MLP's L2-normalized embeddings keep its loss falling in task 0 at any learning rate tried.
  results = Run(two_tasks(method="co2l", **{"train.lr": 100.0, **NO_READOUT}), tmp_path).run()
  assert "health: task 0, epoch 2: loss_not_falling" in capsys.readouterr().err
  assert not results["health"]["ok"] and "loss_not_falling" in results["health"]["checks"]


# ----------------------------------------------------------------------------- the module's run

@pytest.fixture(scope="module")
def sd_run(tmp_path_factory):
  """The tiny config's run (SD, 5 tasks): test_train.py's module run has the same train programs. Its tests come
  last in this module so that, on the other xdist worker, that run has compiled them by then (a run of these
  settings compiles two programs, ~9 s each with both workers busy)."""
  run = Run(tiny_config(), tmp_path_factory.mktemp("sd"))
  return run, run.run()


def test_every_task_trains(sd_run):
  """Later tasks learn: the network moves during the last task and every task starts at the full lr."""
  run, results = sd_run
  # The past model is the network at the start of the last task.
  assert _param_change(run.state.params, run.past.params) > 1e-2
  for t in range(results["num_tasks"]):
    first = next(c for c in results["curves"] if c["task"] == t)
    assert first["lr"] > 0.5 * run.config.train.lr, (t, first)
  # The tiny config's last task: far above the 50 % chance of its two digits.
  assert results["acc_matrix"]["task_il"][-1][-1] > 90


def test_raw_pixel_baseline_in_results(sd_run):
  _, results = sd_run
  px = results["baselines"]["raw_pixels"]
  assert set(px) == {"class_il", "task_il"}
  assert 50 < px["class_il"] < 100 and px["task_il"] > 90  # a real classifier of 10 digits, not chance
  # Its time is its own phase: probe_s is the work the published code also does (experiments/reference.py).
  timing = results["timing"]
  assert {"train_s", "boundary_s", "probe_s", "baselines_s", "checkpoint_s", "compile_s", "epoch_setup_s",
          "epoch_end_s"} <= set(timing)
  assert timing["baselines_s"] > 0 and timing["train_compile_s"] <= timing["train_s"]
  assert timing["compile_s"] >= timing["train_compile_s"] + timing["boundary_compile_s"] - 1e-3
  assert results["provenance"]["jax"] == jax.__version__ and "git_commit" in results["provenance"]


def test_raw_pixels_without_training_equal_the_trained_runs_baseline(sd_run):
  """experiments/raw_pixels.py (for runs that left the baseline out): the memory alone, advanced task by task
  without training, gives the same rows, so the same converged classifier as the trained run's."""
  run, results = sd_run
  assert raw_pixels.raw_pixels(run.config) == results["baselines"]
  assert run.config.method == "sd"  # the run's own config is left as it was


def test_every_epoch_reports_the_embedding_and_gradient_norms(sd_run):
  """The tiny config L2-normalizes its embeddings: z_norm is 1 by hand; every task still has a gradient."""
  _, results = sd_run
  for c in results["curves"]:
    np.testing.assert_allclose(c["z_norm"], 1.0, rtol=1e-5, err_msg=str(c))
    assert c["grad_norm"] > 1e-3, c


@pytest.mark.parametrize("center", [True, False], ids=["centred_head", "uncentred_head"])
def test_a_common_offset_of_the_heads_output_collapses_only_the_uncentred_head(tmp_path, center):
  """The collapse models.Center removes, constructed rather than found in one trajectory: after task 0 the head's
  output gets a common offset of norm 1e4 (fc2's bias; on configs/mnist5k.py finetune grew one of norm 647
  against a spread of 188). Uncentred, L2 normalization sends every input to one point: task 1's SupCon sits at
  the constant-embedding value, its embedding variance near 0, and both checks flag it. Centred, the offset
  cancels and task 1 trains."""
  config = two_tasks(method="finetune", **{"model.head_center": center, "train.epochs": 3, **NO_READOUT})
  run = Run(config, tmp_path)
  run.start()
  run.run_task(0)
  params = jax.tree.map(lambda x: x, run.state.params)
  bias = params["head"]["fc2"]["bias"]
  params["head"]["fc2"]["bias"] = bias + 1e4 / np.sqrt(bias.size)
  run.state = run.state.replace(params=params)
  run.run_task(1)
  results = run.finish()
  task1 = [c for c in results["curves"] if c["task"] == 1][-1]
  checks = {f["check"] for f in results["health"]["flags"] if f["task"] == 1}
  if center:
    assert task1["supcon"] < (1 - 2 * health.NEAR) * task1["supcon_const"] and task1["z_var"] > 0.1, task1
    assert not checks & {"supcon_constant", "embedding_variance"}, results["health"]
  else:
    assert abs(task1["supcon"] - task1["supcon_const"]) < 1e-3 * task1["supcon_const"], task1
    assert task1["z_var"] < 1e-4 and {"supcon_constant", "embedding_variance"} <= checks, results["health"]
