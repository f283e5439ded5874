"""perf/benchmark.py keeps what it measured when a later section dies, and never a half-written file."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from perf import against_published

REPO = pathlib.Path(__file__).resolve().parents[2]

# The augmentation section runs (quick shapes); the projection section then dies as a killed run would.
SCRIPT = """
import sys
from absl import app
from perf import benchmark
def die(quick):
  raise SystemExit(3)
benchmark.bench_projection = die
app.run(benchmark.main, argv=["benchmark", "--only=aug,projection", "--quick", "--out=" + sys.argv[1]])
"""


def test_a_run_killed_after_a_section_keeps_its_rows_marked_incomplete(tmp_path):
  out = tmp_path / "bench.json"
  proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=REPO, capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
  assert proc.returncode == 3, proc.stderr[-2000:]
  saved = json.loads(out.read_text())
  assert saved["complete"] is False and "host" in saved["device"]
  assert [r["component"] for r in saved["rows"]] == ["two-view augmentation (CIFAR recipe)"]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]  # no temporary file left behind


@pytest.mark.parametrize("only,line", [
    ("aug,cpu_race", "error: --only=cpu_race needs --torch_python=PY (a python with torch)"),
    ("aug,nope", "error: unknown --only nope; expected some of "
                 "step,search,eb,probe,task,aug,projection,cpu_race,dtype"),
])
def test_a_race_without_torch_python_or_an_unknown_section_is_refused_before_any_section(only, line):
  proc = subprocess.run([sys.executable, "-m", "perf.benchmark", f"--only={only}", "--quick",
                         "--out=/nonexistent/dir/b.json"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line]


def test_the_race_against_the_published_code_refuses_a_missing_reference_in_one_line(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "perf.against_published", f"--reference={tmp_path}/none",
                         f"--scratch={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
      f"error: --reference={tmp_path}/none has no refrun.sh and LASP/ (the published code and its runner)"]
  assert not any(tmp_path.iterdir())  # nothing written before the refusal


def test_the_race_rows_divide_each_sides_own_times():
  """Hand values: 2 tasks of 3 + 2 epochs; the published side's train time is the sum of its epochs."""
  pub = {"probe_best_acc": 90.0, "runner_wall_s": 300.0, "repr_process_s": 200.0, "probe_process_s": 90.0,
         "tasks": [{"epochs_s": [10.0, 10.0, 10.0]}, {"epochs_s": [20.0, 20.0]}], "mask_search_s_total": 50.0}
  res = {"protocol": {"num_tasks": 2, "epochs_first": 3, "epochs": 2}, "final": {"domain_il": 91.0},
         "runner_wall_s": 100.0, "timing": {"train_s": 35.0, "probe_s": 5.0, "compile_s": 10.0},
         "boundaries": [{"search_s": 1.5}], "health": {"checks": []}}
  r = against_published.row("sd", pub, res)
  assert (r["epochs"], r["published"]["train_s"], r["published"]["epoch_s"], r["lasp_jax"]["epoch_s"]) == (
      5, 70.0, 14.0, 7.0)
  assert "| sd | 2, 5 | 90.00 | 91.00 | 300 | 100 | **3.00x** | 70 (14.00) | 35 (7.00) | 2.00x | 50.0 | 1.5 (10) |" \
      in against_published.table([r])


@pytest.mark.parametrize("args,line", [
    (["--cells=seq-er,nope"], "error: unknown cell nope; expected some of seq-er, seq-derpp, rot-er, rot-derpp, "
                              "seq-der, seq-hal, seq-icarl, seq-gss, rot-hal, rot-agem, rot-gss"),
    (["--set=gamma=1"], "error: --set=gamma=1: expected KEY=NUMBER with KEY one of lr, bs, mb, alpha, beta"),
    (["--set=alpha=x"], "error: --set=alpha=x: expected KEY=NUMBER with KEY one of lr, bs, mb, alpha, beta"),
    (["--mammoth=/nonexistent"], "error: --mammoth must name a folder set up by run_mammoth.sh SCRATCH setup "
                                 "(venv/, mammoth/)"),
])
def test_the_race_against_mammoth_refuses_a_bad_cell_or_a_missing_mammoth_in_one_line(args, line):
  proc = subprocess.run([sys.executable, "-m", "perf.against_mammoth", *args], cwd=REPO, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line]


def test_the_race_against_mammoth_runs_both_sides_with_mammoths_effective_draw():
  from perf import against_mammoth  # noqa: PLC0415
  # mammoth sets its draw to the batch size whatever --minibatch_size says: seq-mnist DER++ draws 10, not 128
  assert "--minibatch_size=10" in against_mammoth.mammoth_args("seq-mnist", "derpp", 0)
  ours = against_mammoth.ours_command("seq-mnist", "derpp", 0, "/tmp/w")
  assert "--config.method_args.minibatch_size=10" in ours and "--config.train.batch_size=10" in ours
  assert "--config.num_seeds=5" in against_mammoth.ours_command("seq-mnist", "er", 0, "/tmp/w", seeds=5)
  # --published_draws: both sides draw the DER paper's 128 (mammoth_timed.py restores it after mammoth's override)
  assert "--minibatch_size=128" in against_mammoth.mammoth_args("seq-mnist", "derpp", 0, published_draws=True)
  ours = against_mammoth.ours_command("seq-mnist", "derpp", 0, "/tmp/w", published_draws=True)
  assert "--config.method_args.minibatch_size=128" in ours and "--config.train.batch_size=10" in ours
  assert against_mammoth.best("seq-mnist", "er", True)["mb"] == 10  # ER's published draw is its batch already
  # A-GEM as mammoth runs it (a training batch of each ended task offered to its memory) on both sides
  assert "--model=agem" in against_mammoth.mammoth_args("rot-mnist", "agem_batch", 0)
  ours = against_mammoth.ours_command("rot-mnist", "agem_batch", 0, "/tmp/w")
  assert {"--config.method=agem", "--config.method_args.task_samples=128", "--config.train.batch_size=128"} <= set(ours)
  # a method's own best arguments under each side's name: HAL's anchors weight, beta and gamma
  assert {"--hal_lambda=0.1", "--beta=0.7", "--gamma=0.5"} <= set(against_mammoth.mammoth_args("seq-mnist", "hal", 0))
  ours = against_mammoth.ours_command("seq-mnist", "hal", 0, "/tmp/w")
  assert {"--config.method_args.hal_lambda=0.1", "--config.method_args.beta=0.7",
          "--config.method_args.gamma=0.5"} <= set(ours)


def test_the_race_against_mammoth_sets_one_change_on_both_sides(monkeypatch):
  from perf import against_mammoth  # noqa: PLC0415
  monkeypatch.setattr(against_mammoth, "OVERRIDES", against_mammoth.parse_overrides(["alpha=0", "mb=32"]))
  assert {"--alpha=0.0", "--beta=1.0", "--minibatch_size=32"} <= set(against_mammoth.mammoth_args("seq-mnist", "derpp",
                                                                                                   0))
  ours = against_mammoth.ours_command("seq-mnist", "derpp", 0, "/tmp/w")
  assert {"--config.method_args.alpha=0.0", "--config.method_args.beta=1.0",
          "--config.method_args.minibatch_size=32"} <= set(ours)
  assert not any(a.startswith("--alpha") for a in against_mammoth.mammoth_args("seq-mnist", "er", 0))  # ER has none


def test_the_race_against_mammoth_times_a_warm_run_beside_the_cold_one_by_its_own_wall():
  from perf import against_mammoth  # noqa: PLC0415
  assert "--compile_cache=" in against_mammoth.ours_command("seq-mnist", "er", 0, "/tmp/w")  # cold: cache off
  assert "--compile_cache=/c" in against_mammoth.ours_command("seq-mnist", "er", 0, "/tmp/w", cache="/c")
  side = lambda wall: {"wall_s": wall, "train_s": 1.0, "accuracy": [{"class_il": 80.0}]}
  rows = [{"cell": "seq-er", "seed": s, "ours": side(10.0), "ours_warm": side(5.0), "mammoth": side(80.0)}
          for s in (0, 1)]
  text = against_mammoth.table(rows, None)
  assert "| 8.0x | 5.0 | 16.0x |" in text  # mammoth 80 s against 10 s cold and 5 s warm
  assert text.splitlines()[-1].endswith("wall 20 s against 160 s (8.0x); warm cache 10 s (16.0x)")
  assert "warm" not in against_mammoth.table([{k: v for k, v in rows[0].items() if k != "ours_warm"}], None)


def test_the_race_table_again_from_its_file_gives_each_cells_welch_interval(tmp_path):
  from scipy import stats  # noqa: PLC0415
  side = lambda acc: {"wall_s": 10.0, "train_s": 5.0, "accuracy": [{"class_il": acc, "task_il": 98.0}]}
  rows = [{"cell": "seq-der", "seed": s, "ours": side(a), "mammoth": side(b)} for s, (a, b) in
          enumerate([(80.0, 78.0), (82.0, 79.0)])]
  (tmp_path / "race.json").write_text(json.dumps({"rows": rows, "five_seeds": None}))
  proc = subprocess.run([sys.executable, "-m", "perf.against_mammoth", f"--table_only={tmp_path}"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  # by hand: 81 - 78.5 = +2.5; scipy's Welch test for its p
  p = stats.ttest_ind([80.0, 82.0], [78.0, 79.0], equal_var=False).pvalue
  line = (tmp_path / "table.md").read_text().splitlines()[-1]
  assert "class_il difference +2.50 [" in line and line.split("(Welch, p ")[1].startswith(f"{p:.2f})"), line


def _race(folder, seeds, acc):
  side = lambda a, wall: {"wall_s": wall, "train_s": wall / 2, "accuracy": [{"domain_il": a}]}
  rows = [{"cell": "rot-er", "seed": s, "ours": side(a, 60.0), "mammoth": side(a + 1, 750.0)}
          for s, a in zip(seeds, acc)]
  folder.mkdir()
  (folder / "race.json").write_text(json.dumps({"rows": rows, "five_seeds": None}))


def test_earlier_races_join_in_one_table_seed_by_seed(tmp_path):
  from lasp_jax import errors  # noqa: PLC0415
  from perf import against_mammoth  # noqa: PLC0415
  _race(tmp_path / "s12", [1, 2], [82.0, 84.0])  # a later race adds seeds 1-2 (--first_seed=1) to seed 0's
  _race(tmp_path / "s0", [0], [80.0])
  with pytest.raises(errors.ConfigError, match="needs --out"):
    against_mammoth._table_only([str(tmp_path / "s0"), str(tmp_path / "s12")], "")
  against_mammoth._table_only([str(tmp_path / "s12"), str(tmp_path / "s0")], str(tmp_path / "all"))
  lines = (tmp_path / "all" / "table.md").read_text().splitlines()
  assert [l.split("|")[2].strip() for l in lines[2:5]] == ["0", "1", "2"]
  # each side's mean (std) over the three seeds, their 1.00 gap, and 2250 s of mammoth against 180 s
  assert lines[5].startswith("rot-er: domain_il lasp_jax 82.00 (2.00), mammoth 83.00 (2.00); domain_il difference "
                             "-1.00") and lines[5].endswith("wall 180 s against 2250 s (12.5x)")
