"""Experiment aggregation against hand-computed values, and a smoke run of each experiment."""

import importlib
import json
import math
import pathlib
import re
import shutil

import numpy as np
import pytest

from configs import rmnist_cpu
from experiments import aggregate, equal_heads, gpu_queue, lasp_gain, reference, run, runner, studies, subsets
from lasp_jax import config_lib, errors
from tests.conftest import cli_in_process

# Asserts outcomes of training: CI checks it under a second XLA:CPU code path too (.ci/run).
pytestmark = pytest.mark.trajectory


def test_mean_std_and_cells():
  m, s, n = aggregate.mean_std([70.0, 72.0, None, 74.0])
  assert (m, n) == (72.0, 3) and s == pytest.approx(2.0)  # sample std of 70, 72, 74
  assert aggregate.mean_std([None]) == (None, None, 0)
  assert aggregate.cell((72.0, 2.0, 3), (73.72, 0.52)) == "72.00 (2.00) [paper 73.72; Δ -1.72]"
  assert aggregate.cell((None, None, 0)) == "–"


def test_markdown_and_csv_layout():
  md = aggregate.markdown_table(["a", "b"], [[1, "x, y"]])
  assert md.splitlines() == ["| a | b |", "|---|---|", "| 1 | x, y |"]
  assert aggregate.csv_table(["a", "b"], [[1, "x, y"]]) == 'a,b\n1,"x, y"\n'


@pytest.mark.parametrize("name", ["table1", "table2", "embedding", "table3"])
def test_each_experiment_smoke(tmp_path, name):
  # Table 1's baseline rows are the same runs as any method's (test_baselines.py): one row here.
  grid = dict(methods=("sd",), memories=(40,), baselines=False) if name == "table1" else {}
  out = run.run_experiment(name, "tiny", 1, str(tmp_path), **grid)
  table = (out / "table.md").read_text()
  assert "0 failed" in table
  assert (out / "table.csv").exists()
  runs = json.loads((out / "runs.json").read_text())
  assert runs and all("error" not in r for r in runs)
  for r in runs:
    assert pathlib.Path(r["workdir"], "acc_matrix.png").exists()
  if name == "embedding":
    assert (out / "embedding_sweep.png").exists()
  if name == "table3":
    assert "Mean subset accuracy on past tasks" in table and "–" not in table.splitlines()[2]
  again = run.run_experiment(name, "tiny", 1, str(tmp_path), **grid)  # finished runs are skipped
  assert (again / "table.md").read_text() == table


def test_identical_config_reuses_finished_run_of_another_experiment(tmp_path, monkeypatch):
  config = run.make_config(run.dataset_configs("tiny")["cifar10"], method="sd", seed=0)
  name = f"{config.dataset}_{config.method}_{run.config_lib.config_hash(config)}"
  first = tmp_path / "table1" / "tiny" / "runs" / name
  first.mkdir(parents=True)
  result = {"final": {"class_il": 61.0}, "acc_matrix": {}, "curves": {}}
  (first / "results.json").write_text(json.dumps(result))
  monkeypatch.setattr(run.train, "train_and_evaluate", lambda *a, **k: pytest.fail("trained a finished config again"))
  monkeypatch.setattr(run.report, "run_pictures", lambda res, wd: None)
  records = run.run_grid(tmp_path / "table2" / "tiny", [({"seed": 0}, config)])
  assert records == [{"seed": 0, "workdir": str(first), "results": result}]
  other = run.make_config(run.dataset_configs("tiny")["cifar10"], method="sd", seed=1)
  with pytest.raises(pytest.fail.Exception):  # another seed is another config: it must train
    run.run_grid(tmp_path / "table2" / "tiny", [({"seed": 1}, other)])


def test_subset_classifier_reaches_the_bayes_rate_at_embedding_scale():
  """8 Gaussian classes at the scale of unit-norm embedding coordinates (~0.03): the classifier of a
  subset holding all informative dims nears the Bayes rate; one holding none is at chance."""
  rng = np.random.default_rng(0)
  c, d, n = 8, 10, 1600
  means = rng.normal(size=(c, d)) * 0.03
  y = rng.integers(0, c, n)
  x = np.concatenate([means[y], np.zeros((n, 4))], 1) + rng.normal(size=(n, d + 4)) * 0.03
  tr, te = slice(0, 1200), slice(1200, None)
  bayes = np.mean(np.argmin(((x[te, None, :d] - means[None]) ** 2).sum(-1), 1) == y[te])  # 0.8575
  acc = np.asarray(subsets.subset_accuracy(np.array([np.arange(d), np.arange(d, d + 4).tolist() * 2 + [d, d + 1]]),
                                           x[tr].astype(np.float32), y[tr], x[te].astype(np.float32), y[te],
                                           num_classes=10))
  assert acc[0] >= bayes - 0.02, (acc, bayes)  # unstandardized features stopped at 0.830
  assert acc[1] < 0.25                          # chance is 1/8


def test_paper_scale_grids_are_complete_and_valid(tmp_path):
  """What `--scale=paper` would run, checked without data: sizes, validated configs, published settings."""
  plans = {name: run.plan(name, "paper", 5, str(tmp_path)) for name in run.EXPERIMENTS}
  # Table 1: (4 methods + finetune + joint) x 2 memories + finetune without memory, x 3 datasets x 5 seeds.
  assert {k: len(v) for k, v in plans.items()} == {"table1": (6 * 2 + 1) * 3 * 5, "table2": 3 * 2 * 5,
                                                    "embedding": 2 * 2 * 6 * 5, "table3": 5}
  for name, runs in plans.items():
    assert len({wd for _, _, wd, _ in runs}) == len(runs), f"{name}: two grid points share a workdir"
  by_group = {}
  for tags, config, _, _ in plans["table1"]:
    by_group.setdefault(tags["group"], set()).add(config.dataset)
    assert config.memory.size == tags["memory"] and config.method == tags["method"] and config.seed == tags["seed"]
  assert by_group == {"cifar10": {"cifar10"}, "tiny": {"tiny_imagenet"}, "rmnist": {"mnist"}}
  # The published R-MNIST commands: SD searches on onlypast, GM and SD+GM on onlycurrent.
  rmnist = {t["method"]: c.lasp.srs_data for t, c, _, _ in plans["table1"] if t["group"] == "rmnist"}
  assert rmnist["sd"] == "onlypast" and rmnist["gm"] == rmnist["sd_gm"] == "onlycurrent"
  # Tiny-ImageNet: D = 128 for Co2L, 512 for the LASP methods, as published.
  tiny = {t["method"]: c.model.embedding_dim for t, c, _, _ in plans["table1"] if t["group"] == "tiny"}
  assert tiny["co2l"] == 128 and tiny["sd"] == tiny["gm"] == tiny["sd_gm"] == 512
  assert {t["memory"] for t, _, _, _ in plans["table1"] if t["method"] == "finetune"} == {0, 200, 500}
  assert all(c.memory.size == 500 for _, c, _, _ in plans["embedding"] + plans["table2"])  # as in the paper
  assert {(t["srs"], c.lasp.srs_data) for t, c, _, _ in plans["table2"]} == {(s, s) for s in run.SRS}
  t1_sd500 = {wd.name for t, _, wd, _ in plans["table1"] if t["method"] == "sd" and t["memory"] == 500
              and t["group"] != "rmnist"}
  t2_current = {wd.name for t, _, wd, _ in plans["table2"] if t["srs"] == "onlycurrent"}
  assert t2_current == t1_sd500  # the same configs: trained once, reused


def test_reference_comparison_reads_a_published_run_and_sets_its_protocol(tmp_path):
  line = {"run": "rmnist_sd", "dataset": "r-mnist", "method": "sd", "seed": 1,
          "repr_cmd": "main_domain.py --learning_rate 0.01 --n_task 3 --mem_size 200 --start_epoch 3 --epochs 2 "
                      "--batch_size 256 --distill_type SD --distill_power 5 --onlypast --data_folder /x/data_idx",
          "probe_cmd": "main_linear_buffer_domain.py --learning_rate 1 --epochs 5 --target_task 2",
          "tasks": [{"angle_deg": 10.5, "loss_avg": [9.0]},
                    {"angle_deg": 20.25, "select_dims": 151, "loss_avg": [12.0]},
                    {"angle_deg": 30.0, "select_dims": 140, "loss_avg": [11.0]}],
          "probe_best_acc": 75.3, "repr_process_s": 60.0, "probe_process_s": 15.0, "mask_search_s_total": 40.0}
  p = reference.protocol(line)
  assert p == {"data": "idx", "num_tasks": 3, "epochs_first": 3, "epochs": 2, "batch_size": 256, "memory": 200,
               "probe_epochs": 5, "srs": "onlypast", "angles": [10.5, 20.25, 30.0]}
  c = reference.lasp_config(p, "sd", 1, p["angles"], str(tmp_path))
  assert (c.method, c.seed, c.data.num_tasks, c.train.epochs_first, c.train.epochs, c.train.batch_size) == \
      ("sd", 1, 3, 3, 2, 256)
  assert c.data.rotation_angles == (10.5, 20.25, 30.0) and c.data.source == "idx" and c.eval.epochs == 5
  # every published behaviour, from the preset
  assert (c.lasp.mask_objective, c.lasp.restart_selection, c.data.rmnist_test_uses_last_angle,
          c.eval.select_best_on_test, c.train.schedule, c.eval.probe, c.eval.every_task) == \
      ("published_all_pairs", "published_off_by_one", True, True, "published_epoch_cosine", "sgd", False)
  pub = reference.published_side(line)
  assert pub["acc"] == 75.3 and pub["selected_dims"] == [151, 140] and pub["search_s"] == 40.0
  header, rows = reference.table([{"side": "published", "protocol": "{}", "method": "sd", **pub},
                                  {"side": "lasp_jax", "protocol": "{}", "method": "sd", "acc": 80.0, "train_s": 30.0,
                                   "probe_s": 5.0, "boundary_s": 10.0, "search_s": 8.0, "raw_pixels": 70.0,
                                   "baselines_s": 99.0}],
                                 describe=lambda p: "x")
  # the raw-pixel baseline beside the accuracies; its time is not in the ratio (the published code has none)
  assert rows[0][2].startswith("75.30") and rows[0][3].startswith("80.00") and rows[0][4].startswith("70.00")
  assert rows[0][7] == "0.60"  # 45 / 75


def test_every_config_resolves_and_validates():
  names = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[1] / "configs").glob("*.py")
                 if p.stem != "__init__")
  assert {"mnist5k", "rmnist", "rmnist_cpu", "cifar10", "tinyimagenet", "tiny"} <= set(names)
  for name in names:
    config_lib.validate(config_lib.resolved(importlib.import_module(f"configs.{name}").get_config()))


def test_rmnist_cpu_is_the_equal_heads_studys_point_on_the_centred_head():
  d600 = next(p for p in studies.EQUAL_HEADS_POINTS if p.name == "d600")
  sd = next(v for v in studies.VARIANTS if v.label == "SD onlycurrent")
  study = config_lib.flat(studies.equal_heads_config(d600, sd, "centred", 0))
  config = config_lib.flat(config_lib.resolved(rmnist_cpu.get_config()))
  assert {k for k in set(study) | set(config) if study.get(k) != config.get(k)} == {"progress", "pictures"}


def test_equal_heads_curve_cells_by_hand(tmp_path):
  """The curve's cells: mean and std over seeds per (method, head, digits per domain), flagged runs counted and
  included, a diverged run left out, Split points and ablation rows not on the curve."""
  row = lambda point, head, method, seed, m1, flags=(): {"point": point, "head": head, "method": method,
                                                         "seed": seed, "m1": m1, "flags": list(flags),
                                                         "raw_pixels": 50.0, "commit": "abc"}
  rows = [row("d600", "centred", "Co2L", 0, 80.0), row("d600", "centred", "Co2L", 1, 84.0, ["ird_uniform"]),
          row("d600", "centred", "Co2L", 2, None, ["diverged"]), row("d1200", "centred", "Co2L", 0, 90.0),
          row("d600", "published", "SD onlycurrent", 0, 70.0), row("c1", "centred", "Co2L", 0, 60.0),
          row("d600", "centred", "SD lambda1", 0, 85.0)]
  cells = equal_heads.curve_cells(rows)
  assert set(cells) == {("Co2L", "centred"), ("SD onlycurrent", "published")}
  (d, mean, std, n, flagged), (d2, mean2, std2, n2, flagged2) = cells[("Co2L", "centred")]
  assert (d, mean, n, flagged, d2, mean2, n2, flagged2) == (600, 82.0, 2, 1, 1200, 90.0, 1, 0)
  np.testing.assert_allclose(std, np.std([80.0, 84.0], ddof=1))
  equal_heads.curve(rows, tmp_path / "curve.png", {("Co2L", "centred"): [92.0, 93.0]})
  assert (tmp_path / "curve.png").stat().st_size > 10_000


def test_equal_heads_table_pairs_by_seed_against_co2l_and_finetune():
  """Paired rows by hand: a seed only one side finished is no pair; 3 pairs get a verdict, fewer say n=."""
  row = lambda method, seed, m1: {"point": "d600", "head": "centred", "method": method, "seed": seed, "m1": m1,
                                  "m2": None if m1 is None else m1 + 10.0, "flags": [], "raw_pixels": 50.0,
                                  "train_s": 1.0, "commit": "abc", "date": "2026-11-29",
                                  "final_row": None if m1 is None else [m1 - 4.0] * 5 + [m1] * 15}
  rows = ([row("Co2L", s, 88.0 + s) for s in range(4)] + [row("finetune", s, 86.0 + s) for s in range(3)]
          + [row("SD onlycurrent", s, v) for s, v in enumerate([81.0, 84.0, 85.0, 99.0])]
          + [row("GM", 0, 80.0), dict(row("GM", 1, None), flags=["diverged (non-finite loss): task 1"])])
  text = equal_heads.table(rows)
  assert "| GM †1 | 2 (1 diverged) | 80.00 (0.00) |" in text  # listed and counted, never dropped
  assert "| d600 | centred | GM | 1 | failed | failed | 50.00 | † diverged (non-finite loss): task 1 |" in text
  # SD - Co2L over seeds 0-3: -7, -5, -5, +8 -> mean -2.25, std 6.90, t(3) 3.182: +-10.98, includes 0;
  # SD - finetune over 0-2: -5, -3, -3 -> -3.67, std 1.155, t(2) 4.303: [-6.53, -0.80], below
  assert ("| centred | SD onlycurrent − Co2L | 4 | -2.25 (6.90) | -2.25 [-13.23, +8.73] (n=4) | "
          "no difference detected (±10.98) |") in text
  assert ("| centred | SD onlycurrent − finetune | 3 | -3.67 (1.15) | -3.67 [-6.54, -0.80] (n=3) | "
          "below (interval excludes 0) |") in text
  assert "| centred | finetune − Co2L | 3 | -2.00 (0.00) | -2.00 [-2.00, -2.00] (n=3) | below" in text
  # the final row by quarters of the 20 domains: Co2L's oldest 84, 85, 86, 87 (mean 85.5), then 88-91 (89.5)
  assert "| centred | Co2L | 4 | 85.50 (1.29) | 89.50 (1.29) | 89.50 (1.29) | 89.50 (1.29) |" in text
  assert "| centred | GM | 1 | 76.00 (0.00) |" in text  # the diverged seed has no row to average


def test_lasp_gain_pairs_seeds_and_reports_failed_runs():
  p1 = next(p for p in studies.GAIN_POINTS if p.name == "p1")
  res = lambda acc, last: {"final": {"domain_il": acc}, "acc_matrix": {"domain_il": [[None, None], [acc, last]]},
                           "health": {"checks": []}, "wall_time_s": 1.0}
  rows = [lasp_gain.row_of(p1, "Co2L", 0, res(70.0, 90.0)), lasp_gain.row_of(p1, "Co2L", 1, res(80.0, 91.0)),
          lasp_gain.row_of(p1, "SD onlycurrent", 0, res(73.0, 92.0)),
          lasp_gain.row_of(p1, "SD onlycurrent", 1, {"failed": "non-finite loss at task 2; more", "seed": 1})]
  assert studies.gains(rows, "p1", "SD onlycurrent", "m1") == [3.0]  # seed 1 failed: no pair
  assert rows[2]["m2"] == 92.0  # last-angle = A[T][T]
  text = lasp_gain.table(rows, [p1])
  assert "SD onlycurrent† (1 seeds, 1 failed)" in text and "| p1 | SD onlycurrent | 1 | failed | failed |" in text
  assert "**SD onlycurrent − Co2L** | **3.00 (0.00)**; 95 % interval +3.00, too few pairs |" in text


def _queue_cell(out, name, seed, final, last, wall, checks=None):
  (out / name).mkdir(parents=True)
  res = {"seed": seed, "final": {"domain_il": final}, "acc_matrix": {"domain_il": [[last]]}, "wall_time_s": wall,
         "baselines": {"raw_pixels": {"domain_il": 50.0 + seed}}}
  if checks is not None:
    res["health"] = {"checks": checks}
  (out / name / "results.json").write_text(json.dumps(res))
  (out / name / "config.json").write_text(json.dumps({"lasp.mask_objective": "published_all_pairs"}))


def test_gpu_queue_order_estimates_and_table_by_hand(tmp_path):
  names = [c.name for c in gpu_queue.CELLS]
  assert names[:3] == ["sd_centred_seed0", "co2l_centred_seed0", "sd_centred_seed1"] and names[14] == "gm_seed0"
  assert names[6:9] == ["sd_seed1", "co2l_seed1", "sd_seed2"]
  assert names[-1] == "sd_gm_m500_seed4" and len(set(names)) == len(names) == 6 + 8 + 10 + 20
  assert "model.head_center=True" in gpu_queue.Cell("co2l", 0, head="centred").overrides()
  # The tuned pair comes right after the fixed decisive cells once results/threats has chosen a lambda.
  (tmp_path / "threats.json").write_text(json.dumps({"chosen": {"SD": {"lambda": 1.0}, "Co2L": {"lambda": 0.5}}}))
  tuned = gpu_queue.tuned_cells(tmp_path / "threats.json")
  assert [c.name for c in tuned[:2]] == ["sd_centred_lambda1_seed0", "co2l_centred_lambda0.5_seed0"]
  assert "train.ird_weight=0.5" in tuned[1].overrides() and len(tuned) == 6
  assert gpu_queue.tuned_cells(tmp_path / "none.json") == ()
  assert "lasp.srs_data=onlypast" in gpu_queue.Cell("sd", 1).overrides()  # as the stored seed 0
  assert not any("srs" in o for o in gpu_queue.Cell("co2l", 1).overrides())
  _queue_cell(tmp_path, "sd_seed0", 0, 94.0, 97.0, 100.0)
  _queue_cell(tmp_path, "sd_seed1", 1, 90.0, 99.0, 120.0, checks=["supcon_constant"])
  _queue_cell(tmp_path, "co2l_seed1", 1, 80.0, 95.0, 80.0, checks=[])
  (tmp_path / "co2l_seed2").mkdir()
  runner.mark_failed(tmp_path / "co2l_seed2", "error: non-finite loss", 2)
  assert [gpu_queue.state(tmp_path, gpu_queue.Cell(*a)) for a in (("sd", 1), ("co2l", 2), ("sd", 2))] == [
      "done", "failed", "missing"]
  assert gpu_queue.expected_s(tmp_path, gpu_queue.Cell("sd", 3)) == 1.25 * 120.0  # its method's slowest run
  assert gpu_queue.expected_s(tmp_path, gpu_queue.Cell("gm", 0)) == 1.25 * 120.0  # no GM run: any method's
  # A cold run's compile time counts unless its group's programs are in the --scratch cache (``warm``).
  res = json.loads((tmp_path / "sd_seed1" / "results.json").read_text())
  (tmp_path / "sd_seed1" / "results.json").write_text(json.dumps({**res, "timing": {"compile_s": 70.0}}))
  assert gpu_queue.expected_s(tmp_path, gpu_queue.Cell("sd", 3)) == 1.25 * (70.0 + 100.0)  # seed 0's rest: 100 s
  warm = frozenset({gpu_queue.Cell("sd", 3).group})
  assert gpu_queue.expected_s(tmp_path, gpu_queue.Cell("sd", 3), warm) == 1.25 * 100.0
  assert gpu_queue.expected_s(tmp_path, gpu_queue.Cell("sd", 3, head="centred"), warm) == 1.25 * 170.0
  two = [gpu_queue.Cell("sd", 3), gpu_queue.Cell("co2l", 3)]
  # No batch of 2 measured: SD's largest compile (seed 1's 70 s) and both cells' rest (SD's 100, Co2L's 80) x 1.25.
  assert gpu_queue._batch_estimate(tmp_path, two) == pytest.approx(1.25 * (70.0 + 100.0 + 80.0))
  assert gpu_queue._batch_estimate(tmp_path, two, warm) == pytest.approx(1.25 * (100.0 + 80.0))
  assert gpu_queue._batch_estimate(tmp_path, two[:1]) == gpu_queue.expected_s(tmp_path, two[0])
  batch = {"cells": ["b", "c"], "ended": ["b", "c"], "parallel": 2, "wall_s": 130.0}
  (tmp_path / "queue_log.json").write_text(json.dumps([batch, {**batch, "ended": ["b"], "wall_s": 400.0}]))
  assert gpu_queue._batch_estimate(tmp_path, two) == pytest.approx(1.25 * 130.0)  # the whole batch, no single
  (tmp_path / "queue_log.json").write_text(json.dumps([{"cells": ["a"], "ended": ["a"], "parallel": 1,
                                                         "wall_s": 100.0}, batch]))
  assert gpu_queue._batch_estimate(tmp_path, two) == pytest.approx(1.25 * 170.0 * 1.3)  # SD x the measured ratio
  gpu_queue.write_table(tmp_path)
  means = (tmp_path / "table.md").read_text().split("## Paired")[0]
  rows = {l.split(" | ")[1]: l for l in means.splitlines() if l.startswith("| 200")}
  assert set(rows) == {"SD (onlypast)", "Co2L"}
  sd = rows["SD (onlypast)"]  # seeds 0 and 1: mean 92, std sqrt(8); last-angle 98 (1.41), paper 98.80
  assert "| 2 | 92.00 (2.83) | 98.00 (1.41) [paper 98.80; Δ -0.80] | 50.50 (0.71) | 1: supcon_constant |" in sd
  assert "| 1 (+1 failed) | 80.00 (0.00) |" in rows["Co2L"] and "| ok |" in rows["Co2L"]
  assert "`lasp.mask_objective`" not in (tmp_path / "table.md").read_text()  # set as published
  # Seed 1 is the one seed both finished (Co2L seed 2 failed, SD seed 2 is missing): 90 − 80 and 99 − 95.
  assert "| 200 | published | 1 | +10.00 | too few pairs | +4.00 | too few pairs | 1: +10.00 |" in (
      tmp_path / "table.md").read_text()
  assert "`lasp.restart_selection`" in (tmp_path / "table.md").read_text()


def test_equal_heads_reads_the_paper_scale_cells_by_head_and_skips_others(tmp_path):
  _queue_cell(tmp_path, "sd_seed0", 0, 94.0, 97.0, 100.0)
  _queue_cell(tmp_path, "sd_centred_seed0", 0, 93.0, 98.0, 300.0)
  _queue_cell(tmp_path, "sd_centred_seed1", 1, 91.0, 98.0, 300.0)
  _queue_cell(tmp_path, "co2l_centred_seed0", 0, 92.0, 98.0, 300.0)
  _queue_cell(tmp_path, "co2l_m500_seed0", 0, 10.0, 10.0, 300.0)  # memory 500: not this comparison
  _queue_cell(tmp_path, "gm_seed0", 0, 50.0, 50.0, 100.0)  # neither SD nor Co2L
  (tmp_path / "co2l_seed0").mkdir()
  runner.mark_failed(tmp_path / "co2l_seed0", "error: non-finite loss", 0)
  assert equal_heads.paper_scale(tmp_path) == {("SD onlypast", "published"): [94.0],
                                               ("SD onlypast", "centred"): [93.0, 91.0],
                                               ("Co2L", "centred"): [92.0]}


def test_gpu_queue_goes_one_cell_at_a_time_when_a_batch_cell_finds_no_device(tmp_path, monkeypatch):
  out, scratch, batches = tmp_path / "out", tmp_path / "scratch", []
  out.mkdir(), scratch.mkdir()

  def fake_batch(out_, scratch_, cells, extra, limit_s):  # the first cell runs, a second cannot open the device
    batches.append([c.name for c in cells])
    for i, c in enumerate(cells):
      (scratch_ / f"{c.name}.log").write_text(
          "RuntimeError: Unable to initialize backend 'cuda'" if i else "done")
    _queue_cell(out_, cells[0].name, cells[0].seed, 90.0, 95.0, 10.0)
    return [cells[0].name]

  monkeypatch.setattr(gpu_queue, "run_batch", fake_batch)
  gpu_queue.advance(out, scratch, budget_s=10_000, parallel=2, max_cells=2, extra=[], with_raw_pixels=False)
  assert batches == [["sd_centred_seed0", "co2l_centred_seed0"], ["co2l_centred_seed0"]]
  # Any other failure in a batch (no results, no device message) stops the call as before.
  (scratch / "co2l_centred_seed1.log").write_text("killed")
  batches.clear()
  monkeypatch.setattr(gpu_queue, "run_batch", lambda o, s, cells, e, l: batches.append(len(cells)) or [])
  gpu_queue.advance(out, scratch, budget_s=10_000, parallel=2, max_cells=0, extra=[], with_raw_pixels=False)
  assert batches == [2]


def test_gpu_queue_lands_what_two_calls_returned_once_each(tmp_path):
  import tarfile  # noqa: PLC0415
  out = tmp_path / "results"
  _queue_cell(out, "sd_centred_seed0", 0, 93.0, 98.0, 300.0)
  old = {"cells": ["sd_centred_seed0"], "ended": ["sd_centred_seed0"], "parallel": 1, "wall_s": 300.0}
  (out / "queue_log.json").write_text(json.dumps([old]))
  (out / "raw_pixels.json").write_text(json.dumps({"seed0_m200": {"domain_il": 45.0}}))
  archives = []
  for i, name in enumerate(["co2l_centred_seed0", "sd_centred_seed1"]):  # each call started from ``out`` as it was
    call = tmp_path / f"call{i}" / "rmnist_paper"
    shutil.copytree(out, call)
    _queue_cell(call, name, int(name[-1]), 90.0 + i, 97.0, 280.0)
    (call / "logs").mkdir()
    new = {"cells": [name], "ended": [name], "parallel": 1, "wall_s": 280.0 + i}
    (call / "queue_log.json").write_text(json.dumps([old, new]))
    (call / "raw_pixels.json").write_text(json.dumps({"seed0_m200": {"domain_il": 99.0},  # ours is kept
                                                      f"seed{i + 1}_m200": {"domain_il": 50.0 + i}}))
    archives.append(tmp_path / f"call{i}.tgz")
    with tarfile.open(archives[-1], "w:gz") as tar:
      tar.add(call, arcname="rmnist_paper")
  assert gpu_queue.land(out, archives[0]) == ["co2l_centred_seed0"]
  # The second call's folder as the GPU tool returns it: the archive and the call's log beside it.
  returned = tmp_path / "returned"
  returned.mkdir()
  shutil.copy(archives[1], returned / "rmnist_paper.tgz")
  (returned / "log.txt").write_text("=== queue rc=0\n")
  assert gpu_queue.land(out, returned) == ["sd_centred_seed1"]
  assert gpu_queue.land(out, returned) == []  # again: nothing new, the log kept once
  assert [p.name for p in (out / "logs").iterdir()] == ["call1.txt"]
  assert [b["cells"] for b in json.loads((out / "queue_log.json").read_text())] == [
      ["sd_centred_seed0"], ["co2l_centred_seed0"], ["sd_centred_seed1"]]
  assert json.loads((out / "raw_pixels.json").read_text()) == {
      "seed0_m200": {"domain_il": 45.0}, "seed1_m200": {"domain_il": 50.0}, "seed2_m200": {"domain_il": 51.0}}
  assert json.loads((out / "sd_centred_seed1" / "results.json").read_text())["final"]["domain_il"] == 91.0
  (tmp_path / "bad.tgz").write_bytes(b"not a tar")
  with pytest.raises(errors.DataError, match="cannot unpack --land"):
    gpu_queue.land(out, tmp_path / "bad.tgz")


def test_gpu_queue_keeps_the_caches_a_call_returned_for_the_next_call(tmp_path):
  returned, dest = tmp_path / "returned", tmp_path / "repo" / ".gpu_autotune"
  returned.mkdir()
  (tmp_path / "repo").mkdir()
  assert gpu_queue.keep_caches(returned, dest) == [] and not dest.exists()  # nothing returned: nothing made
  (returned / "autotune.tgz").write_bytes(b"tune")
  (returned / "rmnist_paper.tgz").write_bytes(b"cells")
  assert gpu_queue.keep_caches(returned, dest) == ["autotune.tgz"]
  (returned / "xla_cache.tgz").write_bytes(b"cache")
  assert gpu_queue.keep_caches(returned, dest) == ["xla_cache.tgz", "autotune.tgz"]
  assert sorted(p.name for p in dest.iterdir()) == ["autotune.tgz", "xla_cache.tgz"]
  assert (dest / "xla_cache.tgz").read_bytes() == b"cache"
  assert gpu_queue.keep_caches(returned / "rmnist_paper.tgz", dest) == []  # an archive, not a folder


def test_gpu_queue_keeps_no_raw_pixels_from_a_fit_that_printed_nothing(tmp_path):

  class Printed:
    returncode = 0

    def __init__(self, stdout):
      self.stdout = stdout

    def communicate(self, timeout):
      return self.stdout, None

  fits = {"s1": Printed(""), "s2": Printed('progress\n{"raw_pixels": {"domain_il": 47.0}}\n')}
  gpu_queue.collect_raw_pixels(tmp_path, fits, wait_s=1.0)
  assert json.loads((tmp_path / "raw_pixels.json").read_text()) == {"s2": {"domain_il": 47.0}}


def test_gpu_queue_runs_the_next_cell_and_starts_none_past_its_budget(tmp_path):
  """A tiny Domain-IL dry run of the queue's command line: one cell, its raw pixels, the log; then a call whose
  budget is shorter than the finished cell took runs nothing."""
  # The tiny config's Domain-IL runs, one step a call.
  tiny = ["--config=configs/tiny.py", "--set=data.scenario=domain", "--set=data.num_tasks=2",
          "--set=train.epochs_first=1", "--set=train.epochs=1", "--set=train.steps_per_call=1"]
  call = lambda *a: cli_in_process("experiments.gpu_queue", f"--out={tmp_path}", *tiny, *a)
  out = call("--budget_s=600", "--max_cells=1", f"--scratch={tmp_path / 'scratch'}")
  assert out.returncode == 0, out.stderr[-3000:]
  left = len(gpu_queue.queue()) - 1
  assert f"queue: 1 cells run; --max_cells=1 reached, {left} cells missing" in out.stdout, out.stdout
  res = json.loads((tmp_path / "sd_centred_seed0" / "results.json").read_text())
  config = json.loads((tmp_path / "sd_centred_seed0" / "config.json").read_text())
  assert (res["seed"], config["method"], config["lasp.srs_data"], config["eval.every_task"],
          config["model.head_center"]) == (0, "sd", "onlypast", False, True)
  assert res["baselines"]["raw_pixels"]["domain_il"] > 10.0  # fitted on the host meanwhile, written in
  log = json.loads((tmp_path / "queue_log.json").read_text())
  assert [(b["cells"], b["ended"]) for b in log] == [(["sd_centred_seed0"], ["sd_centred_seed0"])]
  # The scratch folder's cache now holds SD's centred programs: a later call there counts them compiled.
  assert json.loads((tmp_path / "scratch" / "warm_groups.json").read_text()) == [[200, "centred", None, "sd"]]
  assert "| 200 | SD (onlypast), centred head | 1 |" in (tmp_path / "table.md").read_text()
  again = call(f"--budget_s={int(res['wall_time_s'])}", "--raw_pixels=False")
  assert again.returncode == 0 and "next ['co2l_centred_seed0'] needs" in again.stdout, again.stdout
  assert not (tmp_path / "co2l_centred_seed0").exists()
  assert len(json.loads((tmp_path / "queue_log.json").read_text())) == 1
  for arg, line in [("--parallel=0", "error: flag --parallel=0: 0 is not a positive integer"),
                    ("--margin=0.5", "error: flag --margin=0.5: 0.5 is not number >= 1.0")]:
    bad = call(arg)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [line]


def test_findings_draws_the_threats_and_the_paper_scale_pair_from_the_shipped_runs():
  from experiments import findings  # noqa: PLC0415
  got = {label: d for panel, label, d in findings.intervals() if panel == "main"}
  for part in ("each at its chosen λ", "d600, memory 500"):
    assert [len(d) for label, d in got.items() if part in label] == [3], part
  m500 = findings.REPO / "results/threats/runs/memory500_steps/p60k/centred"
  sd_of = lambda co2l: m500 / co2l.parent.name.replace("Co2L", "SD_onlypast") / "results.json"
  pairs = [r for r in m500.glob("Co2L_s*/results.json") if sd_of(r).exists()]
  assert [len(d) for label, d in got.items() if "paper steps, memory 500" in label] == [len(pairs)]
  final = lambda run: json.loads((run / "results.json").read_text())["final"]["domain_il"]
  seed = lambda run: int(re.search(r"\d+$", run.name).group())  # by number: seed 10 after seed 9
  # The paper-step pairs, seed by seed from the shipped runs: a seed counts once both methods of the head have it.
  runs = findings.REPO / "results" / "threats" / "runs" / "paper_steps" / "p60k"
  for head in ("centred", "published"):
    sds = sorted((runs / head).glob("SD_onlypast_s*"), key=seed)
    pairs = [(sd, runs / head / sd.name.replace("SD_onlypast", "Co2L")) for sd in sds]
    want = [final(sd) - final(co2l) for sd, co2l in pairs if (co2l / "results.json").exists()]
    (steps,) = [d for label, d in got.items() if f"5 × 59,000 digits, {head}" in label]
    assert len(want) >= 3 and steps == pytest.approx(want), head
  # The paper-scale pair, seed by seed from the cells' own files: SD − Co2L per-angle on the centred head.
  folder = findings.REPO / "results" / "rmnist_paper"
  seeds = sorted(seed(p) for p in folder.glob("sd_centred_seed*") if (folder / f"co2l_{p.name[3:]}").exists())
  (paper,) = [d for label, d in got.items() if label.startswith("paper scale")]
  assert len(seeds) >= 2 and paper == pytest.approx(
      [final(folder / f"sd_centred_seed{s}") - final(folder / f"co2l_centred_seed{s}") for s in seeds])


def test_findings_adds_memory_500_at_the_paper_steps_once_a_pair_exists(tmp_path, monkeypatch):
  from experiments import findings  # noqa: PLC0415
  row = lambda grid, method, seed, m1: {"grid": grid, "method": method, "head": "centred", "seed": seed, "m1": m1}
  rows = [row("memory500", "SD lambda5", s, 80.0) for s in range(2)] + [
      row("memory500", "Co2L lambda1", s, 82.0 + s) for s in range(2)]
  (tmp_path / "results" / "threats").mkdir(parents=True)
  runs = tmp_path / "results" / "threats" / "runs.json"
  monkeypatch.setattr(findings, "REPO", tmp_path)
  runs.write_text(json.dumps({"rows": rows}))
  assert [label for _, label, _ in findings.threat_intervals()] == ["d600, memory 500: SD − Co2L"]
  # SD alone at seed 0 pairs with nothing; Co2L's seed 0 then forms one pair: 93.5 − 94.0
  rows += [row("memory500_steps", "SD onlypast", 0, 93.5)]
  runs.write_text(json.dumps({"rows": rows}))
  assert len(findings.threat_intervals()) == 1
  rows += [row("memory500_steps", "Co2L", 0, 94.0)]
  runs.write_text(json.dumps({"rows": rows}))
  got = {label: d for _, label, d in findings.threat_intervals()}
  assert got == {"d600, memory 500: SD − Co2L": [-2.0, -3.0],
                 "paper steps, memory 500 (centred): SD (onlypast) − Co2L": [-0.5]}


def test_table1_mnist_verdicts_by_hand_and_every_published_cell_listed():
  from experiments import table1_mnist as t1  # noqa: PLC0415
  assert t1.verdict((85.0, 1.0, 3), (85.01, 1.90)) == "within"        # |85.00 - 85.01| <= 1.90
  # outside the spread: Welch's p of our 3 seeds against the paper's 10 runs (scipy's own test as the hand value)
  from scipy import stats  # noqa: PLC0415
  p = stats.ttest_ind_from_stats(88.0, 1.0, 3, 85.01, 1.90, 10, equal_var=False).pvalue
  assert t1.verdict((88.0, 1.0, 3), (85.01, 1.90)) == f"above (Welch p {p:.2f})" == "above (Welch p 0.01)"
  assert t1.verdict((88.0, None, 1), (85.01, 1.90)) == "above"  # one seed: no spread of ours to test with
  assert t1.verdict((88.0, 1.0, 3), (85.01, 1.90), holm=0.5) == "above (Welch p 0.01, Holm 0.50)"
  # the family: every cell with a published spread and two or more seeds (Rotated MNIST's here); Holm over two
  rot = lambda m, mem, s, acc: {"benchmark": "rot-mnist", "method": m, "memory": mem, "seed": s, "flags": [],
                                "accuracy": {"domain_il": acc}}
  family = t1.holm_family([rot("er", 200, 0, 80.0), rot("er", 200, 1, 82.0), rot("der", 200, 0, 90.0),
                           rot("der", 200, 1, 90.5), rot("hal", 200, 0, 80.0)])  # HAL: one seed, not tested
  ps = [stats.ttest_ind_from_stats(81.0, math.sqrt(2), 2, 85.01, 1.90, 10, equal_var=False).pvalue,
        stats.ttest_ind_from_stats(90.25, math.sqrt(0.125), 2, 90.04, 2.61, 10, equal_var=False).pvalue]
  want = sorted(ps)[0] * 2, max(sorted(ps)[0] * 2, min(1.0, sorted(ps)[1]))
  assert sorted(family) == [("rot-mnist", "der", 200, "domain_il"), ("rot-mnist", "er", 200, "domain_il")]
  assert sorted(family.values()) == pytest.approx(sorted(want))
  assert t1.verdict((81.0, 1.0, 3), (80.11, None)) == "within 2 std (ours)"  # no published spread: 0.89 <= 2 x 1.0
  assert t1.verdict((81.0, 0.4, 3), (80.11, None)) == "above"
  assert t1.verdict((81.0, None, 1), (80.11, None)) == "one seed"
  run = lambda m, mem, s, acc: {"benchmark": "seq-mnist", "method": m, "memory": mem, "seed": s, "commit": "abc",
                                "date": "2026-12-07", "cpu": "x", "accuracy": {"class_il": acc, "task_il": 98.0},
                                "raw_pixels": None, "flags": [], "train_s": 5.0, "wall_s": 6.0}
  text = t1.table([run("er", 200, 0, 80.0), run("er", 200, 1, 82.0)])
  assert "| ER | 200 | 2 | 81.00 (1.41) | 80.43 | within 2 std (ours) |" in text
  assert "| GSS | 200 | 0 | – | 38.90 | – | – | 95.02 | – | – |" in text  # not run yet: its published row stays
  assert text.count("| A-GEM |") == 4  # both benchmarks, both memories: every published cell, run or not
  # A-GEM's second reading runs the registry's A-GEM with one training batch of each task offered to its memory,
  # against the same published cells
  assert text.count("| A-GEM (a batch a task) |") == 4
  c, ref = t1.config("seq-mnist", "agem_batch", 200, 0), t1.config("seq-mnist", "agem", 200, 0)
  assert (c.method, c.method_args.task_samples, ref.method_args.task_samples) == ("agem", 10, 0)
  assert c.train.batch_size == 10 and t1.config("rot-mnist", "agem_batch", 500, 0).method_args.task_samples == 128
  # iCaRL's second reading replays its exemplars as the DER paper's code cast them; iCaRL itself replays the images
  c, ref = t1.config("seq-mnist", "icarl_uint8", 500, 0), t1.config("seq-mnist", "icarl", 500, 0)
  assert (c.method, c.method_args.exemplars, ref.method_args.exemplars) == ("icarl", "published_uint8", "images")
  assert ("rot-mnist", "icarl_uint8", 200) not in t1.BEST_ARGS
  assert text.count("| iCaRL (the 2020 code's exemplars) |") == 2
  assert t1.config("seq-mnist", "icarl_raw", 200, 0).method_args.exemplars == "published_raw"
  assert text.count("| iCaRL (the 2020 code's, raw features) |") == 2


def test_threats_means_wait_for_a_seed_most_methods_lack_and_leave_out_the_few_behind():
  from experiments import threats  # noqa: PLC0415
  rows = lambda have: [{"method": m, "head": "centred", "seed": k} for m, ks in have.items() for k in ks]
  kept = lambda have: sorted((r["method"], r["seed"]) for r in threats._complete(rows(have))[0])
  # Seed-major lanes mid-seed: two of three methods still lack seed 2, so it waits for all.
  assert kept({"a": [0, 1, 2], "b": [0, 1], "c": [0, 1]}) == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0),
                                                                ("c", 1)]
  # One of three one seed behind (a weight added later), another two behind: both wait whole, the rest keep 3.
  assert kept({"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1], "d": [0]}) == [("a", 0), ("a", 1), ("a", 2), ("b", 0),
                                                                           ("b", 1), ("b", 2)]
  # Half behind: the seed waits (the lanes' own order), and a bound's lone seed is never waited for.
  assert kept({"a": [0, 1], "b": [0], "finetune": [0]}) == [("a", 0), ("b", 0), ("finetune", 0)]


def test_threats_table_names_ers_chosen_learning_rate_once_every_rate_has_the_same_seeds():
  from experiments import threats  # noqa: PLC0415
  row = lambda lr, seed, head: {"grid": "replay_lr", "method": threats.er_variant(lr).label, "seed": seed,
                                "validation": {"head": head}, "flags": []}
  rows = [row(0.01, s, 80.0) for s in (0, 1)] + [row(0.03, s, h) for s, h in ((0, 91.0), (1, 83.0))]
  rows += [row(0.1, 0, 88.0)]
  assert threats._replay_choice_section(rows) == []  # lr 0.1 lacks seed 1: no choice yet
  rows += [row(0.1, 1, 87.0)]
  # The best mean picks (0.1's 87.50 over 0.03's 87.00), not the best single run (0.03's 91).
  assert "\n".join(threats._replay_choice_section(rows)).splitlines()[2:] == [
      "| method | chosen | mean validation accuracy |", "|---|---|---|",
      "| ER | learning rate 0.1 | 0.01: 80.00, 0.03: 87.00, 0.1: 87.50 |"]
  # DER++'s weights, at ER's chosen lr 0.1, once replay_weights is whole
  rows += [{"grid": "replay_weights", "method": threats.derpp_variant(0.1, a, b).label, "seed": s,
            "validation": {"head": v}, "flags": []} for (a, b), v in zip(threats.DERPP_WEIGHTS, (80.0, 88.0, 81.0))
           for s in (0, 1)]
  assert "\n".join(threats._replay_choice_section(rows)).splitlines()[-1] == (
      "| DER++ | alpha, beta 0.5, 0.5 | 0.1, 0.5: 80.00, 0.5, 0.5: 88.00, 0.5, 1: 81.00 |")
  # A collapsed seed rules its setting out at once; the healthy settings' seeds must still agree.
  rows[-3]["flags"] = ["embedding_variance"]  # (0.5, 0.5) seed 1
  rows += [{"grid": "replay_weights", "method": threats.derpp_variant(0.1, 0.1, 0.5).label, "seed": 2,
            "validation": {"head": 99.0}, "flags": []}]
  assert threats.chosen_derpp_weights(rows, 0.1) is None  # (0.5, 1) lacks seed 2
  rows += [{"grid": "replay_weights", "method": threats.derpp_variant(0.1, 0.5, 1.0).label, "seed": 2,
            "validation": {"head": 50.0}, "flags": []}]
  assert threats.choose_replay(rows, "replay_weights", list(threats.derpp_candidates(0.1)))[1] == {
      "DER++ lr0.1 a0.1 b0.5": pytest.approx(259 / 3), "DER++ lr0.1 a0.5 b1": pytest.approx(212 / 3)}


def test_threats_seeds_past_the_choice_widen_the_verdicts_pairs_and_choose_nothing():
  from experiments import threats  # noqa: PLC0415
  row = lambda grid, label, seed, v, m1: {"grid": grid, "method": label, "head": "centred", "seed": seed,
                                          "validation": {"lbfgs": v, "head": v}, "flags": [], "m1": m1,
                                          "lbfgs_test": m1}
  lams = [(m, w) for m in threats.METHODS for w in threats.LAMBDAS[m]]
  rows = [row("lambda", threats.lambda_variant(m, w).label, s, 80.0 + w, 85.0 + s) for m, w in lams for s in range(3)]
  rows += [row("replay_lr", threats.er_variant(lr).label, s, 80.0 + 10 * lr, 86.0 + s) for lr in threats.REPLAY_LRS
           for s in range(3)]
  rows += [row("replay_lr", "Co2L lambda0", s, 80.0, 84.0) for s in range(3)]
  before = (threats.choose(rows), threats.replay_choice(rows))
  assert threats._wider_section(rows) == []  # seeds 0-2 only: the replay_lr section already has these pairs
  # Seeds 3-4 of the published pair, of ER at its chosen lr (0.1) and Co2L at lambda 0, with validation figures
  # that would win every choice if they counted.
  rows += [row("lambda", label, s, 99.0, 85.0 + s) for label in ("SD lambda5", "Co2L lambda1") for s in (3, 4)]
  rows += [row("replay_lr", label, s, 99.0, 90.0 + s) for label in ("ER lr0.1", "Co2L lambda0") for s in (3, 4)]
  assert (threats.choose(rows), threats.replay_choice(rows)) == before and before[1] == {"ER": 0.1}
  lines = [ln for ln in "\n".join(threats._wider_section(rows)).splitlines()
           if ln.startswith("| ER lr0.1 − SD lambda5 | test, each")]
  # seeds 0-2: (86 + s) - (85 + s) = 1; seeds 3-4: (90 + s) - (85 + s) = 5: five pairs, mean 2.6
  assert len(lines) == 1 and "| 5 | +2.60 [" in lines[0], lines
  # its paired t test by hand: t = 2.6 / (2.191 / sqrt 5) = 2.653, 4 degrees of freedom; Holm's p no smaller
  p, holm, detectable = (float(x) for x in lines[0].strip("| ").split(" | ")[-3:])
  assert p == 0.057 and p <= holm <= 1.0
  # detectable at 80 % power: (t_0.975,4 2.776 + t_0.8,4 0.941) x 2.191 / sqrt 5 = 3.64
  assert detectable == 3.64
  assert [r["seed"] for r in threats.choosing(rows) if r["method"] == "ER lr0.1"] == [0, 1, 2]
