"""The validation split (held-out training digits), the read-outs scored on it, the choice of a setting on it,
and the paired t intervals every table reports."""

import dataclasses
import json
import math

import numpy as np
import pytest

from experiments import studies, threats
from lasp_jax import config_lib
from lasp_jax.data import sources, streams
from lasp_jax.errors import ConfigError, DataError
from lasp_jax.eval import evaluators, metrics
from lasp_jax.loop import steps as steps_lib
from tests.conftest import REPO, Run, cli_in_process, two_tasks

pytestmark = pytest.mark.xdist_group("train")


def _unique_dataset(train_per_class=30, test_per_class=10, classes=4):
  """Images that encode their own row (no two alike), train and test drawn from disjoint codes."""
  def make(n, start):
    codes = np.arange(start, start + n * classes)
    images = np.zeros((len(codes), 4, 4, 1), np.uint8)
    images[:, 0, 0, 0], images[:, 0, 1, 0] = codes % 256, codes // 256
    return images, np.repeat(np.arange(classes), n)[np.random.default_rng(0).permutation(len(codes))]
  return sources.ArrayDataset("unique", *make(train_per_class, 0), *make(test_per_class, 10_000), classes)


def _rows(images):
  return {bytes(x.tobytes()) for x in images}


@pytest.mark.parametrize("train_per_class", [10, 0])
def test_validation_digits_are_disjoint_from_training_and_test_digits(train_per_class):
  data = _unique_dataset()
  out = sources.carve(data, train_per_class=train_per_class, validation_per_class=5, seed=3)
  train, val, test = _rows(out.train_images), _rows(out.validation_images), _rows(out.test_images)
  assert len(val) == 5 * 4 and np.all(np.bincount(out.validation_labels) == 5)
  assert not val & train and not val & test and test == _rows(data.test_images)
  assert val | train <= _rows(data.train_images)
  if train_per_class:
    # The training subset is the one a run without a validation set trains on: adding one changes no run.
    same = sources.train_subset(data, train_per_class, 3)
    np.testing.assert_array_equal(out.train_images, same.train_images)
    np.testing.assert_array_equal(out.train_labels, same.train_labels)
  else:
    assert len(train) + len(val) == len(data.train_labels)


def test_too_few_training_images_for_the_validation_set_is_one_error():
  with pytest.raises(DataError, match="too few"):
    sources.carve(_unique_dataset(), train_per_class=28, validation_per_class=5, seed=0)


@pytest.mark.parametrize("key, value, match", [("data.validation_per_class", -1, "validation_per_class"),
                                               ("eval.final_readouts", ("bogus",), "final_readouts")])
def test_bad_validation_settings_are_refused(key, value, match):
  with pytest.raises(ConfigError, match=match):
    config_lib.validate(config_lib.resolved(two_tasks(**{key: value})))


def test_the_validation_read_out_scores_exactly_as_the_test_read_out_on_the_same_rows(tmp_path):
  run = Run(two_tasks(**{"data.validation_per_class": 20, "eval.final_readouts": ("lbfgs",)}),
                           tmp_path)
  vstream, _ = run.validation
  np.testing.assert_array_equal(vstream.test_labels, run.dataset.validation_labels)  # natural class order
  assert np.all(np.bincount(run.dataset.validation_labels) == 20) and len(vstream.test_labels) == 200
  assert not _rows(run.dataset.validation_images) & _rows(run.dataset.train_images)
  inputs = run.readout_inputs()
  pd = evaluators.probe_data(inputs, 1)
  test_figures = evaluators.EVALUATORS["lbfgs"](inputs, 1, pd).overall
  # Handed the test images as its validation set, the validation path must give the test read-out's figures.
  extra, validation = evaluators.final_readouts(dataclasses.replace(inputs, validation=(run.stream, run.test_data)),
                                              1, pd, "lbfgs")
  assert extra == {}  # eval.final_readouts names the run's own probe: nothing more on the test images
  assert validation["lbfgs"]["overall"] == pytest.approx(test_figures, abs=1e-6)


def _row(label, seed, val, test, failed=False):
  return {"grid": "lambda", "method": label, "head": "centred", "seed": seed, "m1": None if failed else test,
          "validation": None if failed else {"lbfgs": val}}


def test_the_lambda_is_chosen_on_validation_accuracy_and_never_on_test_accuracy():
  # Validation prefers lambda 2 for SD and 0.5 for Co2L; the test figures prefer the opposite ends.
  val = {"SD": {0.0: 66, 0.1: 67, 0.25: 68, 0.5: 70, 1.0: 75, 2.0: 80, 5.0: 78},
         "Co2L": {0.5: 88, 1.0: 86, 2.0: 84, 5.0: 80}}
  test = {"SD": {0.0: 99, 0.1: 99, 0.25: 99, 0.5: 95, 1.0: 60, 2.0: 60, 5.0: 60},
          "Co2L": {0.5: 50, 1.0: 50, 2.0: 50, 5.0: 99}}
  rows = [_row(threats.lambda_variant(m, w).label, s, val[m][w] + s, test[m][w])
          for m in val for w in threats.LAMBDAS[m] for s in range(3)]
  chosen = threats.choose(rows)
  assert {m: w for m, (w, _) in chosen.items()} == {"SD": 2.0, "Co2L": 0.5}
  assert chosen["SD"][1][2.0] == pytest.approx(81.0)
  shuffled = [dict(r, m1=-r["m1"]) for r in rows]  # any test figures: the same choice
  assert threats.choose(shuffled) == chosen
  # A lambda with a diverged seed is never chosen; a grid with a missing lambda chooses nothing yet.
  diverged = [_row(r["method"], r["seed"], 0, 0, failed=True) if r["method"] == "SD lambda2" and r["seed"] == 1
              else r for r in rows]
  assert threats.choose(diverged)["SD"][0] == 5.0
  # Likewise a lambda with a flagged (collapsed) seed: its mean is over its healthy seeds, and it is not chosen.
  flagged = [dict(r, flags=["grad_vanished"]) if r["method"] == "SD lambda2" and r["seed"] == 1 else r for r in rows]
  w, means = threats.choose(flagged)["SD"]
  assert w == 5.0 and means[2.0] == pytest.approx(81.0)  # seeds 0 and 2: 80 and 82
  assert threats._choice_cell(flagged, "SD", 2.0, means) == "81.00 (†1 of 3: not eligible)"
  assert threats._choice_cell(flagged, "SD", 5.0, means) == "79.00"
  partial = [r for r in rows if r["method"] != "Co2L lambda5"]
  assert "Co2L" not in threats.choose(partial, whole=True) and threats.choose(partial)["SD"][0] == 2.0
  # A lambda still running is left out of a provisional choice (the tuned grid waits for the whole grid).
  assert threats.choose(partial)["Co2L"][0] == 0.5 and threats.lambdas_pending(partial, "Co2L") == [5.0]


def test_paired_interval_hand_values():
  # Three pairs 1, 2, 3: mean 2, std 1, t(0.975, 2 dof) = 4.302652729749464 (scipy.stats.t.ppf).
  mean, half, n = metrics.paired_interval([1.0, 2.0, 3.0])
  assert (mean, n) == (2.0, 3) and half == pytest.approx(4.302652729749464 / math.sqrt(3), rel=1e-12)
  assert metrics.t_quantile(4) == pytest.approx(2.7764451051977987, rel=1e-12)
  assert metrics.interval_cell([1.0, 2.0, 3.0]) == (3, "+2.00 [-0.48, +4.48]", "no difference detected (±2.48)")
  assert metrics.interval_cell([-3.0, -3.5, -4.0])[2] == "below (interval excludes 0)"
  assert metrics.interval_cell([5.0])[2] == "too few pairs" and metrics.interval_cell([])[0] == 0
  assert metrics.paired_interval([1.0, None, float("nan"), 3.0])[2] == 2  # missing pairs do not count


def test_validation_stream_is_none_without_a_validation_set():
  data = _unique_dataset()
  assert streams.validation_stream(data, two_tasks()) is None
  held = sources.carve(data, train_per_class=10, validation_per_class=5, seed=0)
  assert held.validation_images.shape == (20, 4, 4, 1)
  small = two_tasks(**{"data.num_tasks": 2, "train.batch_size": 4, "memory.size": 4})
  np.testing.assert_array_equal(streams.validation_stream(held, small).test_labels, held.validation_labels)


def test_threats_cells_differ_from_the_study_only_in_what_they_test():
  cells = threats.cells("lambda", range(3))
  assert len(cells) == 33 and [c.label for c in cells[:2]] == ["SD lambda5", "Co2L lambda1"]  # the study's pair
  assert {c.seed for c in cells[:11]} == {0}  # seed-major: a partial grid still compares every lambda
  assert [c.config().train.ird_weight for c in cells[:11] if c.variant.method == "sd"] == [5, 0, 0.1, 0.25, 0.5, 1, 2]
  sd = cells[0].config()
  study = studies.equal_heads_config(threats.D600, studies.VARIANTS[0], "centred", 0)
  differ = {k for k, v in config_lib.flat(sd).items() if config_lib.flat(study).get(k) != v}
  # The same run as the study's SD onlycurrent cell (its training digits too), plus validation and read-outs;
  # its lambda written out, the one the study's cell takes from the method.
  assert differ == {"data.validation_per_class", "eval.final_readouts", "eval.augment", "train.ird_weight"}, differ
  assert config_lib.ird_weight(sd) == config_lib.ird_weight(study) == 5.0
  assert config_lib.config_hash(sd) != config_lib.config_hash(study)
  m500 = threats.cells("memory500", range(1))
  assert [c.config().memory.size for c in m500] == [500, 500]
  assert threats.cells("sdgm", range(1))[0].config().method == "sd_gm"
  steps = threats.cells("paper_steps", range(3))
  assert sum(c.label in ("finetune", "joint") for c in steps) == 2  # the bounds: seed 0 only
  # SD searched on the current task, as the paper's caption says: the paper_steps SD cell but for the search data
  current = threats.cells("paper_steps_current", range(1))
  assert [(c.head, c.point) for c in current] == [("centred", threats.PAPER_STEPS), ("published", threats.PAPER_STEPS)]
  onlypast = next(c for c in steps if c.label == "SD onlypast" and c.head == "centred").config()
  assert config_lib.differing_keys(config_lib.flat(current[0].config()), config_lib.flat(onlypast)) == [
      "lasp.srs_data"]
  p = steps[0].config()
  # per class 0: every training digit but the validation digits
  assert (p.data.train_per_class, p.data.num_tasks, p.train.epochs_first, p.train.epochs) == (0, 5, 20, 20)
  # Rotated MNIST under the study's published per-epoch cosine, as every equal-heads point
  assert (p.data.scenario, p.train.schedule) == ("domain", "published_epoch_cosine") == (
      sd.data.scenario, sd.train.schedule)
  # A key added to the defaults since a shipped run was made is listed in LATER_KEYS at the value that run had:
  # its config then hashes as it did (experiments.run names workdirs by the hash), and its checkpoints resume.
  shipped = json.loads((cells[0].workdir(REPO / "results" / "threats") / "config.json").read_text())
  assert config_lib.differing_keys(shipped, config_lib.flat(sd)) == []
  # Its row reads a finished Rotated MNIST run as every grid's does (a shipped lambda-grid run stands in).
  res = json.loads((threats.cells("lambda", range(1))[0].workdir(REPO / "results" / "threats") / "results.json")
                   .read_text())
  row = threats.row_of(steps[0], res)
  assert (row["m1"], row["sgd"], row["grid"], row["point"]) == (
      res["final"]["domain_il"], res["readouts"]["sgd"]["overall"]["domain_il"], "paper_steps", "p60k")
  # the paper's metric: the last domain's own test digits, by L-BFGS and by the published probe
  assert (row["m2"], row["sgd_last"]) == (res["acc_matrix"]["domain_il"][-1][-1],
                                          res["readouts"]["sgd"]["last_task"]["domain_il"])
  # A checkpoint once an epoch (59,000 digits and the memory's 200 in batches of 512: 116 steps in chunks of 8), and a
  # run started without them resumes under it (nothing that changes results differs).
  chunks = [[0.1] * 8] * 14 + [[0.1] * 4]
  due = [k for k in range(len(chunks) - 1) if steps_lib.checkpoint_due(chunks, k, p.train.checkpoint_every_steps)]
  assert p.train.steps_per_call == 8 and due == [13] and sd.train.checkpoint_every_steps == 0
  without = config_lib.override(steps[0].config(), **{"train.checkpoint_every_steps": 0})  # (in place: a new one)
  assert without.train.checkpoint_every_steps != p.train.checkpoint_every_steps
  assert config_lib.differing_keys(config_lib.flat(without), config_lib.flat(p)) == []
  assert config_lib.config_hash(without) == config_lib.config_hash(p)
  # Memory 500 at the paper-step point: the same SD and Co2L cells on the centred head, seed by seed, but the memory.
  m500_steps = threats.cells("memory500_steps", range(2))
  assert [(c.label, c.head, c.seed) for c in m500_steps] == [
      (c.label, c.head, c.seed) for c in steps if c.head == "centred" and c.label in ("SD onlypast", "Co2L")][:4]
  for c, d in zip(m500_steps, (c for c in steps if c.head == "centred" and c.label in ("SD onlypast", "Co2L"))):
    assert config_lib.differing_keys(config_lib.flat(c.config()), config_lib.flat(d.config())) == ["memory.size"]
    assert c.config().memory.size == 500 and c.workdir(REPO).parent.parent.parent.name == "memory500_steps"


def test_threats_table_pairs_the_published_lambdas_and_reports_the_choice():
  def row(label, seed, test, val):
    return {"grid": "lambda", "method": label, "head": "centred", "seed": seed, "m1": test, "m2": test + 5,
            "sgd": test + 1, "sgd_last": val + 20, "validation": {"lbfgs": val, "sgd": val + 1}, "flags": [],
            "raw_pixels": 50.0,
            "train_s": 1.0, "commit": "abc", "date": "2026-12-01", "point": "d600"}
  rows = [row(threats.lambda_variant(m, w).label, s, 80.0 + w + s + (5 if m == "Co2L" else 0), 70.0 + w)
          for m in threats.METHODS for w in threats.LAMBDAS[m] for s in range(3)]
  chosen = threats.choose(rows)
  text = threats.table(rows, chosen)
  # validation means at 0, 0.1, 0.25, 0.5, 1, 2, 5; Co2L's grid starts at 0.5
  assert "| SD | 5 | 70.00 | 70.10 | 70.25 | 70.50 | 71.00 | 72.00 | 75.00 |" in text
  assert "| Co2L | 5 | – | – | – | 70.50 | 71.00 | 72.00 | 75.00 |" in text
  # SD at 5 − Co2L at 1: test (85 + s) − (86 + s) = −1 in every seed
  assert "| SD lambda5 − Co2L lambda1 | centred | test L-BFGS | 3 | -1.00 [-1.00, -1.00] | below" in text
  # last angle by L-BFGS (test + 5) and by the probe (validation + 20: 75 − 71 in every seed)
  assert "| SD lambda5 − Co2L lambda1 | centred | test last angle (L-BFGS) | 3 | -1.00 [-1.00, -1.00] | below" in text
  assert ("| SD lambda5 − Co2L lambda1 | centred | test last angle (SGD probe) | 3 | +4.00 [+4.00, +4.00] | above"
          in text)
  # A flagged run is counted apart in the last column: Co2L at 5 without its seed 2, (90 + 91) / 2.
  flagged = [dict(r, flags=["grad_vanished"]) if (r["method"], r["seed"]) == ("Co2L lambda5", 2) else r for r in rows]
  line = next(l for l in threats.table(flagged, chosen).splitlines() if l.startswith("| Co2L lambda5 †1 |"))
  assert line.endswith("| 90.50 (0.71) (2) |") and "| SD lambda5 | centred | 3 |" in text and "| as all |" in text
  # Co2L's lambda 5 still running: its choice is provisional, and says so.
  partial = [r for r in rows if not (r["method"] == "Co2L lambda5" and r["seed"] == 2)]
  text = threats.table(partial, threats.choose(partial))
  assert "| SD | 5 |" in text and "Provisional: Co2L's lambda 5 still running." in text


def test_threats_paper_steps_table_splits_each_seeds_difference_by_domain():
  def row(label, head, seed, final_row):
    return {"grid": "paper_steps", "method": label, "head": head, "seed": seed, "m1": sum(final_row) / 5,
            "m2": 99.0, "sgd": None, "validation": None, "flags": [], "raw_pixels": None, "train_s": 1.0,
            "commit": "abc", "date": "2026-12-03", "point": "p60k", "final_row": final_row}
  rows = [row("SD onlypast", "centred", 0, [90.0, 91.0, 92.0, 85.0, 99.0]),
          row("Co2L", "centred", 0, [89.0, 91.5, 92.0, 80.0, 99.0]),
          row("SD onlypast", "published", 1, [90.0] * 5)]  # no Co2L partner: no row
  section = threats.table(rows, {}).split("### By domain")[1].split("##")[0]
  # The run's own angles (seed 0's draw, as the stream makes it) beside the differences, and their mean
  assert [l for l in section.splitlines() if l.startswith("| centred") or l.startswith("| published")] == [
      "| centred | 0 | 112.7, 62.5, 86.1, 175.8, 6.7 | +1.00, -0.50, +0.00, +5.00, +0.00 | +1.10 |"]
  assert list(streams.domain_incremental(_unique_dataset(), 5, 0).angles.round(1)) == [112.7, 62.5, 86.1, 175.8, 6.7]


def test_threats_tuned_grid_runs_each_method_once_its_own_grid_is_whole(tmp_path, monkeypatch, capsys):
  # SD's lambda grid whole, Co2L's not: only SD's tuned cells run, at SD's choice; with neither whole, exit 2.
  ran = []
  monkeypatch.setattr(threats, "finished", lambda out, **kw: [])
  monkeypatch.setattr(threats, "report", lambda out: {})
  monkeypatch.setattr(threats.runner, "run_or_skip", lambda wd, config: ran.append((wd.name, config)) or {})
  monkeypatch.setattr(threats, "row_of", lambda cell, res: {"m1": None, "validation": None, "sgd": None,
                                                             "flags": [], "train_s": None})
  monkeypatch.setattr(threats, "choose", lambda rows, whole=False: {"SD": (0.5, {0.5: 84.0})})
  threats.run_grid(tmp_path, "tuned", range(2))
  assert [name for name, _ in ran] == ["SD_lambda0.5_s0", "SD_lambda0.5_s1"]
  assert all(config_lib.ird_weight(c) == 0.5 and c.data.train_per_class == 250 for _, c in ran)
  assert "Co2L not chosen yet" in capsys.readouterr().out
  monkeypatch.setattr(threats, "choose", lambda rows, whole=False: {})
  with pytest.raises(ConfigError, match="needs a method's whole lambda grid"):
    threats.run_grid(tmp_path, "tuned", range(2))


def test_threats_bad_flags_are_one_line_and_exit_2():
  out = cli_in_process("experiments.threats", "--grids=bogus")
  assert out.returncode == 2 and out.stderr.strip().splitlines() == [
      "error: unknown --grids bogus (expected some of lambda, tuned, memory500, sdgm, paper_steps, "
      "memory500_steps, paper_steps_current, replay_lr, replay_weights, replay_d2500, replay_paper_steps)"]


def test_gm_boundary_table_by_hand(tmp_path):
  res = {"boundaries": [{"frac_weights_gamma_ge_1": 0.5, "gamma_by_layer": {
             "encoder/conv1/kernel": {"frozen": 0.968, "mean": 28.81, "max": 83.0, "size": 500}}}],
         "curves": [{"task": 0, "loss": 9.0}, *({"task": 1, "loss": v} for v in (11.9, 12.4, 12.08))],
         "health": {"checks": ["loss_not_falling"], "flags": [{"task": 1}]}}
  text = threats.gm_boundary(res)
  assert "| encoder/conv1/kernel | 500 | 96.8 % | 28.81 | 83.00 |" in text and "50.0 % of all" in text
  assert "(first 11.900, largest 12.400, last 12.080); health: loss_not_falling (task 1)." in text
  out = cli_in_process("experiments.threats", f"--gm_run={tmp_path}", f"--out={tmp_path}")
  assert out.returncode == 2 and out.stderr.strip() == (f"error: --gm_run {tmp_path} holds no finished GM run with "
                                                        "gamma per weight")


def test_paper_steps_pairs_both_methods_with_each_bound_once_it_has_run():
  row = lambda label, m1, head="centred": {"grid": "paper_steps", "method": label, "head": head, "seed": 0,
                                           "m1": m1, "sgd": m1 + 1, "validation": {"lbfgs": m1 - 1}}
  rows = [row("SD onlypast", 92.0), row("Co2L", 91.0), row("finetune", 86.0)]
  text = "\n".join(threats._differences(rows, "paper_steps", {}))
  assert "| SD onlypast − finetune | centred | test L-BFGS | 1 | +6.00 | too few pairs |" in text
  assert "| Co2L − finetune | centred | test SGD probe | 1 | +5.00 | too few pairs |" in text
  assert "joint" not in text  # no joint run yet: no row
  text = "\n".join(threats._differences([*rows, row("joint", 94.5)], "paper_steps", {}))
  assert "| SD onlypast − joint | centred | test L-BFGS | 1 | -2.50 | too few pairs |" in text
  assert "| Co2L − joint | centred | validation L-BFGS | 1 | -3.50 | too few pairs |" in text


def test_threats_means_run_over_the_seeds_every_method_of_the_head_has():
  def row(label, seed, m1, head="centred"):
    return {"grid": "paper_steps", "method": label, "head": head, "seed": seed, "m1": m1, "m2": 99.0,
            "sgd": None, "validation": {"lbfgs": m1 - 1}, "flags": [], "raw_pixels": None, "train_s": 1.0,
            "commit": "abc", "date": "2026-12-04", "point": "p60k", "final_row": [m1] * 5}
  rows = [row("SD onlypast", 0, 90.0), row("Co2L", 0, 88.0), row("finetune", 0, 80.0),
          row("SD onlypast", 1, 96.0), row("SD onlypast", 1, 70.0, "published")]  # seed 1's Co2L: not yet
  # A method added later, two seeds behind, waits whole: the others' means keep seeds 0-2.
  later = [row(m, k, v) for k in (2, 3) for m, v in (("SD onlypast", 91.0), ("Co2L", 89.0))] + [row("joint2", 0, 50.0)]
  wide = threats.table([*rows, row("Co2L", 1, 87.0), *later], {}).split("## Every run")[0]
  assert "| SD onlypast | centred | 4 | 91.00 (2.71) |" in wide and "joint2 centred seed 0" in wide
  text = threats.table(rows, {})
  section = text.split("## Every run")[0]
  assert ("Not in the means (a seed their head's other methods lack, or a method short of their seeds): SD onlypast "
          "centred seed 1.") in section
  assert "| SD onlypast | centred | 1 | 89.00 | – | 90.00 |" in section  # not (90 + 96) / 2 over 2 seeds
  assert "| SD onlypast | published | 1 | 69.00 | – | 70.00 |" in section  # alone on its head: nothing to wait for
  assert "| finetune | centred | 1 | 79.00 | – | 80.00 |" in section  # a bound: seed 0 only by design
  assert "| paper_steps | centred | SD onlypast | 1 | 95.00 | 96.00 |" in text.split("## Every run")[1]


def test_holm_power_and_welch_hand_values():
  # Holm over (0.01, 0.04, 0.03, none): sorted 0.01 x 3, 0.03 x 2, 0.04 x 1 -> 0.03, 0.06, 0.06 (kept monotone)
  assert metrics.holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
  assert metrics.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
  # paired t: diffs 1, 2, 3 -> t = 2 / (1 / sqrt 3) = 3.4641, 2 dof, p = 0.07418 (scipy.stats.ttest_1samp)
  assert metrics.paired_p([1.0, 2.0, 3.0]) == pytest.approx(0.0741799, rel=1e-5)
  # 3 pairs, std 1: (t(0.975, 2) 4.3027 + t(0.8, 2) 1.0607) / sqrt 3 = 3.0966
  assert metrics.detectable_effect(1.0, 3) == pytest.approx(3.0966, rel=1e-4)
  # The paper's own SD − Co2L gap on R-MNIST: 98.80 (0.26) against 97.90 (1.92), 5 runs each
  t, dof, p = metrics.welch((98.80, 0.26, 5), (97.90, 1.92, 5))
  assert (t, dof) == pytest.approx((1.0387, 4.147), rel=1e-3) and p == pytest.approx(0.356, abs=0.005)
  # Welch's interval of two unpaired groups: scipy's (ttest_ind(equal_var=False).confidence_interval()) for
  # [80, 82, 81.5] against [78, 79, 77.2, 80.1]: 2.5917 [0.3407, 4.8426], p 0.0317
  a, b = [80.0, 82.0, 81.5], [78.0, 79.0, 77.2, 80.1]
  d, half, p = metrics.welch_interval(*(metrics.mean_std(x) for x in (a, b)))
  assert (d - half, d + half, p) == pytest.approx((0.34072, 4.84262, 0.031688), rel=1e-4)


def test_threats_replay_at_d2500_carries_d600s_choices_and_pairs_with_the_tuned_grid(monkeypatch, tmp_path):
  def row(grid, label, seed, m1, head_val, point="d600"):
    return {"grid": grid, "method": label, "head": "centred", "seed": seed, "m1": m1, "m2": m1 + 5, "sgd": m1 + 1,
            "lbfgs_test": m1 - 1, "sgd_last": None, "validation": {"head": head_val, "lbfgs": head_val - 1,
                                                                  "sgd": head_val}, "flags": [], "raw_pixels": None,
            "train_s": 1.0, "commit": "abc", "date": "2026-12-07", "point": point, "final_row": [m1] * 5}
  # ER's validation heads: lr 0.03 best (mean 86); DER++ at it: (0.5, 0.5) best. Test figures never read.
  lr_rows = [row("replay_lr", threats.er_variant(lr).label, s, 99.0 - 10 * lr, v + s)
             for lr, v in ((0.01, 80.0), (0.03, 85.0), (0.1, 84.0)) for s in range(3)]
  assert threats.replay_choice(lr_rows) == {"ER": 0.03}
  w_rows = [row("replay_weights", threats.derpp_variant(0.03, a, b).label, s, 50.0, v)
            for (a, b), v in zip(threats.DERPP_WEIGHTS, (80.0, 88.0, 81.0)) for s in range(3)]
  assert threats.replay_choice(lr_rows + w_rows) == {"ER": 0.03, "DER++": (0.5, 0.5)}
  assert threats.replay_choice(lr_rows[:-1]) == {}  # lr 0.1 short of a seed: nothing chosen yet
  # A folder's finished runs hold replay_weights' rows only where ER's lr is passed (its cells exist at it alone):
  # DER++'s weights are read in a second pass.
  fake = lambda out, seeds=range(10), chosen=None: lr_rows + (w_rows if (chosen or {}).get("ER") == 0.03 else [])
  monkeypatch.setattr(threats, "finished", fake)
  assert threats.replay_chosen(tmp_path, fake(tmp_path)) == {"ER": 0.03, "DER++": (0.5, 0.5)}
  # The cells: Co2L at lambda 0 and ER at each d2500 rate need no choice; DER++ at each rate with d600's weights;
  # drawing 40 (5 steps an epoch)
  cells = lambda chosen: [(c.label, c.point, c.config().method_args.minibatch_size)
                          for c in threats.cells("replay_d2500", range(1), chosen)]
  d2500 = threats.D2500
  assert cells({}) == [("Co2L lambda0", d2500, 0), ("ER lr0.03", d2500, 40), ("ER lr0.1", d2500, 40)]
  assert cells(threats.replay_choice(lr_rows + w_rows))[3:] == [
      ("DER++ lr0.03 a0.5 b0.5", d2500, 40), ("DER++ lr0.1 a0.5 b0.5", d2500, 40)]
  er = threats.cells("replay_d2500", range(1), {"ER": 0.03})[1].config()
  tuned = threats.cells("tuned", range(1), {"SD": 0.5, "Co2L": 2.0})[1].config()
  assert (er.data.train_per_class, er.train.epochs, er.memory.size) == (
      tuned.data.train_per_class, tuned.train.epochs, tuned.memory.size)
  # Paired with the tuned grid's SD and Co2L of the same seeds: ER − SD = (90 + s) − (87 + s) = +3 in each seed
  rows = [row("replay_d2500", "ER lr0.03", s, 90.0 + s, 85.0, "d2500") for s in range(3)] + [
      row("tuned", lb, s, v + s, 80.0, "d2500") for lb, v in (("SD lambda0.5", 87.0), ("Co2L lambda2", 89.0))
      for s in range(3)]
  text = threats.table(rows, {})
  assert "### Paired differences (the tuned grid's Co2L and SD, same seeds)" in text
  assert "| ER lr0.03 − SD lambda0.5 | test, each its own read-out | 3 | +3.00 [+3.00, +3.00] | above" in text
  assert "| ER lr0.03 − Co2L lambda2 | test, each its own read-out | 3 | +1.00 [+1.00, +1.00] | above" in text
  # A fourth seed flagged (a collapse at some task): in the means and pairs, marked, and counted apart beside them
  flagged = dict(row("replay_d2500", "ER lr0.03", 3, 60.0, 85.0, "d2500"), flags=["embedding_variance"])
  text = threats.table(rows + [flagged] + [row("tuned", lb, 3, v + 3, 80.0, "d2500")
                                           for lb, v in (("SD lambda0.5", 87.0), ("Co2L lambda2", 89.0))], {})
  er_row = next(line for line in text.splitlines() if line.startswith("| ER lr0.03 †1 | 4 |"))
  assert er_row.endswith("| embedding_variance | 91.00 (1.00) (3) |")  # 90, 91, 92: the unflagged seeds alone
  assert ("| ER lr0.03 − SD lambda0.5 | test, each its own read-out, unflagged seeds | 3 | +3.00 [+3.00, +3.00] |"
          in text)
  assert "| ER lr0.03 − SD lambda0.5 | test, each its own read-out | 4 | -5.25 [" in text  # (3 + 3 + 3 - 30) / 4
  # its p by hand: sd 16.5, t = -5.25 / (16.5 / 2) = -0.636 on 3 degrees of freedom; ER - Co2L (1, 1, 1, -32) has
  # the same sd, t = -0.879, p 0.444: Holm over the figure's two rows makes both 2 x 0.444
  sd_row = next(line for line in text.splitlines() if line.startswith("| ER lr0.03 − SD lambda0.5 | test, each its "
                                                                        "own read-out | 4 |"))
  # detectable at 80 % power: (t_0.975,3 3.182 + t_0.8,3 0.978) x 16.5 / sqrt(4) = 34.33
  assert sd_row.endswith("| 0.570 | 0.888 | 34.33 |")
  # d2500 chooses each method's rate on validation (lr 0.1's heads 84 < 0.03's 85): lr 0.1 is then in the cells'
  # table but paired with nothing, and the choice is tabled beside d600's
  rows += [row("replay_d2500", "ER lr0.1", s, 99.0, 84.0, "d2500") for s in range(3)]
  assert threats.d2500_choice(rows, None) == {"ER d2500": 0.03}
  text = threats.table(rows + lr_rows, {})
  assert "| ER lr0.1 | 3 |" in text and "ER lr0.1 −" not in text and "| ER lr0.03 − SD lambda0.5 |" in text
  assert "| ER at d2500 | learning rate 0.03 | 0.03: 85.00, 0.1: 84.00 |" in text
  rows[-1] = dict(rows[-1], flags=["loss_not_falling"])  # a collapsed seed: lr 0.1 out, named so
  assert "| ER at d2500 | learning rate 0.03 | 0.03: 85.00, 0.1: †1 of 3, not eligible |" in threats.table(
      rows + lr_rows, {})
  # The paper-step point: the same cells drawing 2 a step (116 steps an epoch), paired with paper_steps' runs
  steps = threats.cells("replay_paper_steps", range(1), {"ER": 0.1, "ER d2500": 0.03})
  assert [(c.label, c.point, c.config().method_args.minibatch_size) for c in steps] == [
      ("Co2L lambda0", threats.PAPER_STEPS, 0), ("ER lr0.03", threats.PAPER_STEPS, 2)]
  rows = [row("replay_paper_steps", "ER lr0.03", s, 97.0, 85.0, "p60k") for s in range(2)] + [
      row("paper_steps", lb, s, v, 80.0, "p60k") for lb, v in (("SD onlypast", 96.0), ("Co2L", 95.5)) for s in range(2)]
  text = threats.table(rows, {})
  assert "### Paired differences (the paper_steps grid's Co2L and SD, same seeds)" in text
  assert "| ER lr0.03 − SD onlypast | test, each its own read-out | 2 | +1.00 [+1.00, +1.00] | above" in text
