"""perf/benchmark.py keeps what it measured when a later section dies, and never a half-written file."""

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

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


def test_race_without_torch_python_is_refused_before_any_section():
  proc = subprocess.run([sys.executable, "-m", "perf.benchmark", "--only=aug,cpu_race", "--quick",
                         "--out=/nonexistent/dir/b.json"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and "--torch_python" in proc.stderr
