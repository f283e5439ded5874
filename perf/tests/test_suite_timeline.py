"""perf/suite_timeline.py: the controller logs each test's end and its worker; the summary finds the longest gap."""

import os
import pathlib
import subprocess
import sys

from perf import suite_timeline

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_each_worker_logs_its_tests_ends_and_the_summary_names_its_longest_gap(tmp_path):
  (tmp_path / "test_three.py").write_text("def test_a():\n  pass\ndef test_b():\n  pass\ndef test_c():\n  pass\n")
  log = tmp_path / "timeline.txt"
  env = dict(os.environ, PYTHONPATH=str(REPO), LASP_SUITE_TIMELINE=str(log))
  env.pop("PYTEST_XDIST_WORKER", None)
  proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "perf.suite_timeline", "-p",
                         "no:cacheprovider", str(tmp_path / "test_three.py")], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  lines = log.read_text().splitlines()  # the controller's lines only: one per test, not one per worker too
  assert sorted(line.split()[2].split("::")[-1] for line in lines) == ["test_a", "test_b", "test_c"]
  assert {line.split()[1] for line in lines} <= {"gw0", "gw1"}
  # by hand: gw0 ends tests at 2 and 7 s (gaps 2, 5), gw1 at 3 s
  s = suite_timeline.summary(["2.00 gw0 t::a", "3.00 gw1 t::b", "7.00 gw0 t::c"])
  assert s == {"gw0": (7.0, 5.0, "t::c"), "gw1": (3.0, 3.0, "t::b")}


def test_the_summaries_refuse_missing_arguments_or_files_in_one_line(tmp_path):
  """suite_timeline and suite_compiles take positional files: none, or one that is not there, is a usage line."""
  nope = tmp_path / "nope.txt"
  cases = [(["perf.suite_timeline"], "usage: python -m perf.suite_timeline TIMELINE.txt"),
           (["perf.suite_timeline", str(nope)], f"error: no such file {nope}"),
           (["perf.suite_compiles", str(tmp_path)], "usage: python -m perf.suite_compiles DIR DURATIONS.txt")]
  for args, line in cases:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line], proc.stderr
