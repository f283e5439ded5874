"""perf/checkpoint_save.py: both forms timed on the run's own trees, their ratio; a bad flag is one line, exit 2."""

import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def _run(*args):
  env = dict(os.environ, PYTHONPATH=str(REPO))
  return subprocess.run([sys.executable, "-m", "perf.checkpoint_save", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)


def test_times_both_forms_on_the_runs_own_trees_and_prints_their_ratio():
  proc = _run("--config=configs/tiny.py", "--config.model.name=mlp", "--config.model.hidden=(16,)", "--saves=3")
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  # The MLP's train state and past model: far fewer leaves than the conv net's 80.
  assert re.search(r"commit [0-9a-f]{7}, .*; \d+ leaves, [\d,]+ values; median of 1 saves", lines[0]), lines[0]
  assert [line.split("  ")[0] for line in lines[1:3]] == ["one array per leaf", "packed"]
  assert re.fullmatch(r"per leaf / packed: \d+\.\d\dx wall, \d+\.\d\dx CPU", lines[3]), lines[3]


def test_a_bad_flag_is_one_line_and_exit_2():
  proc = _run("--saves=2")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == "error: flag --saves=2: 2 is not integer >= 3"
