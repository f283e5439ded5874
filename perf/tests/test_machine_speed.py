"""perf/machine_speed.py: its three figures and provenance in the JSON it writes; a bad flag is one line, exit 2."""

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def _run(*args):
  env = dict(os.environ, PYTHONPATH=str(REPO))
  return subprocess.run([sys.executable, "-m", "perf.machine_speed", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)


def test_writes_the_three_figures_with_the_machine(tmp_path):
  proc = _run("--loop=1000", "--repeats=1", f"--out={tmp_path / 'speed.json'}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads((tmp_path / "speed.json").read_text())
  assert out["loop"] == 1000 and out["python_loop_s"] >= 0
  assert out["matmul_gflops"] > 0 and out["xla_compile_s"] > 0
  assert out["provenance"]["cpu"] and out["provenance"]["git_commit"]
  assert f"({out['provenance']['cpu']})" in proc.stdout and "GFLOP/s" in proc.stdout


def test_a_bad_flag_is_one_line_and_exit_2(tmp_path):
  proc = _run("--repeats=0", f"--out={tmp_path / 'speed.json'}")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == "error: flag --repeats=0: 0 is not a positive integer"
  assert not (tmp_path / "speed.json").exists()
