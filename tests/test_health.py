"""Health checks: each fires on a constructed case and stays quiet on a healthy one; the references are exact."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax import report
from lasp_jax.eval import health
from lasp_jax.loop.steps import Batch
from lasp_jax.method import losses, references
from tests.conftest import Run, tiny_config

# Asserts outcomes of training: CI checks it under a second XLA:CPU code path too (.ci/run).
pytestmark = pytest.mark.trajectory


def test_supcon_constant_value_equals_supcon_of_a_constant_embedding():
  labels = np.array([0, 0, 1, 1, 2, 3])
  current = np.array([True, True, True, True, False, False])
  valid = np.array([True, True, True, True, True, False])
  z = jnp.ones((12, 4)) / 2.0  # every row the same unit vector
  got = losses.supcon_loss(features=z, labels=jnp.asarray(labels), is_current=jnp.asarray(current),
                           valid=jnp.asarray(valid), temperature=0.5, base_temperature=0.07)
  ref = references.supcon_constant_value(num_valid=[5], num_current=[4], temperature=0.5, base_temperature=0.07)
  assert float(got) == pytest.approx(ref, rel=1e-6)
  assert ref == pytest.approx(0.5 / 0.07 * math.log(9) * 4 / 5)
  # Steps weigh by their valid samples: (64 * a + 32 * b) / 96.
  two = references.supcon_constant_value(num_valid=[64, 32], num_current=[64, 32], temperature=0.5,
                                     base_temperature=0.07)
  assert two == pytest.approx(0.5 / 0.07 * (64 * math.log(127) + 32 * math.log(63)) / 96)


def test_reference_values_weigh_the_current_share_of_every_step():
  """An epoch of two steps (B = 4): step 1 has 4 valid rows, 2 of them current (replayed memory beside), step 2
  has 3 valid rows, all current (a padded row marked current must not count). By hand:
  SupCon constant = (4 * (tau/tb) log 7 * 2/4 + 3 * (tau/tb) log 5 * 3/3) / 7, IRD uniform = (4 log 7 + 3 log 5) / 7."""
  valid = np.array([[True, True, True, True], [True, True, True, False]])
  current = np.array([[True, False, True, False], [True, True, True, True]])
  chunk = Batch(np.zeros((2, 4), np.int32), np.zeros((2, 4), np.int32), current, valid)
  refs = references.reference_values([chunk], temperature=0.1, base_temperature=0.07)
  r = 0.1 / 0.07
  assert refs["supcon_const"] == pytest.approx((4 * r * math.log(7) * 0.5 + 3 * r * math.log(5)) / 7, rel=1e-12)
  assert refs["ird_uniform"] == pytest.approx((4 * math.log(7) + 3 * math.log(5)) / 7, rel=1e-12)


def test_ird_uniform_value_equals_ird_against_uniform_relations():
  rng = np.random.default_rng(0)
  z_past = rng.standard_normal((10, 3)).astype(np.float32)
  z_cur = np.ones((10, 3), np.float32)  # constant current embedding: uniform relations
  got = losses.ird_loss(z_cur=jnp.asarray(z_cur), z_past=jnp.asarray(z_past), temp_cur=0.2, temp_past=0.01)
  assert float(got) == pytest.approx(references.ird_uniform_value(num_valid=[5]), rel=1e-5)
  assert references.ird_uniform_value(num_valid=[5]) == pytest.approx(math.log(9))


def test_epoch_checks_fire_on_constructed_cases_and_not_on_healthy_values():
  healthy = {"epoch": 3, "loss": 47.8, "supcon": 27.6, "ird": 4.04, "z_var": 0.9, "supcon_const": 31.3,
             "ird_uniform": 4.844}  # the mnist5k SD run's task 1, last epoch
  assert health.epoch_flags(1, healthy) == []
  cases = {"supcon_constant": {"supcon": 34.38, "supcon_const": 34.40},      # finetune, collapsed
           "ird_uniform": {"ird": 4.83},
           "embedding_variance": {"z_var": 0.003}}
  for check, change in cases.items():
    flags = health.epoch_flags(1, {**healthy, **change})
    assert [f.check for f in flags] == [check], check
    assert flags[0].line().startswith(f"health: task 1, epoch 3: {check}: ")
  # On the reference within 1 % either side; a value far above it is no collapse (the new classes start on top
  # of the replayed ones: a loss worse than a constant embedding's), nor is an IRD far above uniform (Co2L's
  # sharp but unrelated relations on Split-MNIST: 6.738 against 4.833).
  assert health.supcon_at_constant(task=1, epoch=1, supcon=1.0099 * 34.4, constant=34.4)
  assert not health.supcon_at_constant(task=1, epoch=1, supcon=37.1, constant=34.4)
  assert not health.supcon_at_constant(task=1, epoch=1, supcon=0.99 * 34.4 - 0.01, constant=34.4)
  assert not health.ird_at_uniform(task=1, epoch=5, ird=6.738, uniform=4.833)
  assert not health.ird_at_uniform(task=1, epoch=5, ird=0.99 * 4.833 - 0.01, uniform=4.833)
  assert "sits at the uniform-relation value" in health.ird_at_uniform(task=1, epoch=5, ird=4.84, uniform=4.833).message


def test_a_value_the_task_brought_down_onto_its_reference_is_not_flagged():
  # The offline default's SD run, task 1: SupCon 31.82 in its first epoch, 27.81 in its last, against a constant
  # embedding's 27.57 (its classes then read out at 99 %): training, not a collapse.
  assert not health.supcon_at_constant(task=1, epoch=5, supcon=27.81, constant=27.57, first=31.82)
  # A loss that sat on the value, or rose onto it, is.
  assert health.supcon_at_constant(task=1, epoch=5, supcon=27.81, constant=27.57, first=27.70)
  assert health.supcon_at_constant(task=1, epoch=5, supcon=27.60, constant=27.57, first=20.0)
  assert not health.ird_at_uniform(task=1, epoch=5, ird=4.83, uniform=4.8252, first=5.9)
  assert health.ird_at_uniform(task=1, epoch=5, ird=4.83, uniform=4.8252, first=4.80)
  first = {"supcon": 31.82, "ird": 3.35}
  last = {"epoch": 5, "supcon": 27.81, "supcon_const": 27.57, "ird": 3.357, "ird_uniform": 4.825, "z_var": 0.85}
  assert health.epoch_flags(1, last, first) == [] and [f.check for f in health.epoch_flags(1, last)] == [
      "supcon_constant"]


def test_task_checks_fire_on_constructed_cases():
  assert health.loss_not_falling(task=0, epoch_losses=[5.0, 5.0])
  assert health.loss_not_falling(task=0, epoch_losses=[5.0, 4.96])       # fell, but by less than 1 %
  assert not health.loss_not_falling(task=0, epoch_losses=[5.0, 4.95])
  assert not health.loss_not_falling(task=0, epoch_losses=[5.0])         # one epoch: nothing to compare
  # A method that trains on every task so far is asked for a falling loss in task 0 only (its later pools are
  # mostly data already fit): joint's shipped task 13, 5.181 -> 5.219, is noise, not a stalled task.
  rows = lambda t, a, b: [{"task": t, "epoch": 1, "loss": a}, {"task": t, "epoch": 2, "loss": b}]
  assert [f.check for f in health.task_flags(13, rows(13, 5.181, 5.219))] == ["loss_not_falling"]
  assert health.task_flags(13, rows(13, 5.181, 5.219), cumulative=True) == []
  assert [f.check for f in health.task_flags(0, rows(0, 9.5, 9.5), cumulative=True)] == ["loss_not_falling"]
  assert not health.grad_vanished(task=0, grad_norms=[2.0, 0.5, 0.01])    # 0.5 % of the largest: still training
  assert health.grad_vanished(task=3, grad_norms=[2.0, 3.1, 0.0465, 0.0003])
  assert health.grad_vanished(task=4, grad_norms=[3.1, 0.0, float("nan"), 0.0])  # NaN: a resumed run's older epochs
  assert not health.grad_vanished(task=0, grad_norms=[0.0])
  assert not health.diverging(task=4, z_norms=[0.75, 0.87, 1.04, 1.09, 1.18, 1.26, 1.59])
  assert health.diverging(task=1, z_norms=[0.68, 0.62, 15.6])
  assert health.diverging(task=1, z_norms=[float("nan"), 0.7, 3.9e15])
  # A classifier's features grow from their initial norm as they form (ER at d600: 1.22 -> 26.4 within task 0,
  # its cross-entropy 2.31 -> 0.70): not asked of a method whose loss does not reward embedding scale.
  er = [{"task": 0, "epoch": 1, "loss": 2.31, "z_norm": 1.22}, {"task": 0, "epoch": 2, "loss": 0.70, "z_norm": 26.4}]
  assert [f.check for f in health.task_flags(0, er)] == ["diverging"]
  assert health.task_flags(0, er, norm_diverges=False) == []
  assert health.recheck({"method": "er", "curves": er}) == []
  assert [f.check for f in health.recheck({"method": "co2l", "curves": er})] == ["diverging"]
  assert health.mask_degenerate(task=2, selected_dims=1) and health.mask_degenerate(task=2, selected_dims=0)
  assert not health.mask_degenerate(task=2, selected_dims=2)
  assert health.lr_frozen(task=1, lrs=[1e-4] * 3, floor=1e-4) and not health.lr_frozen(task=1, lrs=[0.1, 1e-4],
                                                                                        floor=1e-4)


def test_task_flags_and_record():
  curves = [{"task": 0, "epoch": 1, "loss": 31.5, "supcon": 31.5, "ird": 0.0, "grad_norm": 5.8, "z_norm": 1.0,
             "supcon_const": 34.4, "ird_uniform": 4.84, "z_var": 0.8},
            {"task": 0, "epoch": 2, "loss": 29.6, "supcon": 29.6, "ird": 0.0, "grad_norm": 0.3, "z_norm": 1.0,
             "supcon_const": 34.4, "ird_uniform": 4.84, "z_var": 0.9},
            # Task 1 collapses: SupCon rises onto the constant embedding's value as the embeddings coincide.
            {"task": 1, "epoch": 1, "loss": 32.0, "supcon": 32.0, "ird": 0.0, "grad_norm": 1.5, "z_norm": 1.0,
             "supcon_const": 34.4, "ird_uniform": 4.84, "z_var": 0.4},
            {"task": 1, "epoch": 2, "loss": 34.38, "supcon": 34.38, "ird": 0.0, "grad_norm": 0.05, "z_norm": 1.0,
             "supcon_const": 34.4, "ird_uniform": 4.84, "z_var": 0.003}]
  assert health.task_flags(0, curves[:2]) == []
  flags = health.task_flags(1, curves, boundaries=[{"task": 1, "selected_dims": 1}], selective=True)
  assert sorted(f.check for f in flags) == ["embedding_variance", "loss_not_falling", "mask_degenerate",
                                            "supcon_constant"]
  assert "mask_degenerate" not in [f.check for f in health.task_flags(1, curves, boundaries=[
      {"task": 1, "selected_dims": 1}], selective=False)]
  # A detected-boundary run can open several segments inside one task: every one of their masks is checked.
  later = health.task_flags(1, curves, boundaries=[{"task": 1, "selected_dims": 40}, {"task": 1, "selected_dims": 0}],
                            selective=True)
  assert [f.check for f in later].count("mask_degenerate") == 1
  # Falling onto it from above while the embeddings coincide: the spread check names the collapse.
  from_above = [*curves[:2], {**curves[2], "supcon": 37.1, "loss": 37.1}, curves[3]]
  assert sorted(f.check for f in health.task_flags(1, from_above)) == ["embedding_variance"]
  rec = health.record(flags)
  assert not rec["ok"] and rec["checks"] == ["embedding_variance", "loss_not_falling", "mask_degenerate",
                                             "supcon_constant"]
  assert health.is_flagged({"health": rec}) and health.mark({"health": rec}) == "†"
  assert health.record([]) == {"ok": True, "checks": [], "flags": []} and health.mark({}) == ""


@pytest.fixture(scope="module")
def healthy_run(tmp_path_factory):
  """Joint training of the tiny config's 2 tasks, 2 epochs each: every task trains (measured: no flag)."""
  wd = tmp_path_factory.mktemp("healthy")
  config = tiny_config(**{"method": "joint", "data.num_tasks": 2, "train.epochs_first": 2, "train.epochs": 2,
                          "eval.raw_pixels": False, "pictures": True})
  return Run(config, wd).run(), wd


def test_a_healthy_tiny_run_is_not_flagged_and_records_its_references(healthy_run):
  results, _ = healthy_run
  assert results["health"] == {"ok": True, "checks": [], "flags": []}
  for row in results["curves"]:
    assert 0.02 < row["z_var"] <= 1.0 + 1e-6
    assert row["supcon"] < (1 - health.NEAR) * row["supcon_const"]
    # joint: every sample is current, batch 64 (the epoch's last batch is smaller): (0.1 / 0.07) log(127) at most
    assert row["supcon_const"] <= 0.1 / 0.07 * math.log(127) + 1e-9
  assert health.task_flags(1, results["curves"]) == []


def test_a_run_draws_its_pictures(healthy_run):
  results, wd = healthy_run
  for name in ("acc_matrix.png", "curves.png"):
    data = (wd / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
  flagged = {**results, "health": {"ok": False, "checks": ["supcon_constant"], "flags": []}}
  report.comparison_chart({"sd": flagged, "joint": results}, wd / "comparison.png")
  assert (wd / "comparison.png").read_bytes()[:4] == b"\x89PNG"


def test_curves_png_draws_the_panels_of_the_metrics_a_run_records(tmp_path):
  """A contrastive run's SupCon and IRD panels; a cross-entropy run's own terms in one panel, no SupCon or IRD."""
  contrastive = [{"task": 0, "epoch": 0, "loss": 9.0, "supcon": 9.0, "ird": 0.0, "supcon_const": 9.5,
                  "ird_uniform": 4.8, "grad_norm": 1.0, "z_norm": 1.0, "z_var": 0.5, "lr": 0.1}]
  assert [p[0].split()[0] for p in report.curve_panels(contrastive)] == ["SupCon", "IRD", "training", "learning",
                                                                        "embedding"]
  derpp = [{"task": t, "epoch": 0, "loss": 2.0 - t, "ce": 1.5, "logit_mse": 0.1 * t, "replay_ce": 0.4 * t,
            "z_norm": 3.0, "z_var": 0.6, "grad_norm": 1.0, "lr": 0.03} for t in range(2)]
  panels = report.curve_panels(derpp)
  assert [p[1] for p in panels] == [("loss",), ("lr",), ("z_var",), ("ce", "logit_mse", "replay_ce")]
  er = [{k: v for k, v in c.items() if k not in ("logit_mse", "replay_ce")} for c in derpp]
  assert report.curve_panels(er)[-1][:2] == ("ce", ("ce",))  # one term: its name is the title
  results = {"curves": derpp, "health": {"flags": [{"task": 1, "epoch": 0, "check": "loss_not_falling"}]},
             "dataset": "rmnist", "method": "derpp", "seed": 0, "provenance": {}}
  report.training_curves(results, tmp_path / "curves.png")
  assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
