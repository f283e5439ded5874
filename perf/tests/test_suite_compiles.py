"""perf/suite_compiles.py: a test's own compiles are recorded under its id, and the summary adds them up."""

import json
import os
import pathlib
import subprocess
import sys

from perf import suite_compiles

REPO = pathlib.Path(__file__).resolve().parents[2]

TESTS = """
import jax, jax.numpy as jnp
def test_compiles_one_program():
  jax.jit(lambda x: jnp.sin(x) * 3)(jnp.ones(7)).block_until_ready()
def test_compiles_nothing():
  assert 1 + 1 == 2
"""


def test_each_compile_is_recorded_under_the_test_that_ran_it(tmp_path):
  (tmp_path / "test_two.py").write_text(TESTS)
  env = dict(os.environ, PYTHONPATH=str(REPO), LASP_SUITE_COMPILES=str(tmp_path), JAX_ENABLE_COMPILATION_CACHE="0")
  env.pop("PYTEST_XDIST_WORKER", None)
  proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "perf.suite_compiles", "-p", "no:cacheprovider",
                         "--durations=0", "--durations-min=0", str(tmp_path / "test_two.py")],
                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  rows = json.loads((tmp_path / "compiles_main.json").read_text())
  ids = {r[0].split("::")[-1] for r in rows}
  assert ids == {"test_compiles_one_program"} and any("lambda" in r[1] for r in rows), rows
  assert "Finished XLA compilation" not in proc.stdout  # the log lines go to the plugin, not the output
  durations = suite_compiles.durations_of(proc.stdout)
  assert set(k.split("::")[-1] for k in durations) == {"test_compiles_one_program", "test_compiles_nothing"}
  lines = suite_compiles.summary(rows, durations)
  assert lines[0].startswith(f"in-process backend compiles: {len(rows)}, ")
  one = next(line for line in lines if line.endswith("test_compiles_one_program"))
  compiled = sum(r[2] for r in rows)
  # Its compile seconds beside it; a fast CPU compiles this lambda in under 0.05 s, which prints as 0.0.
  assert compiled > 0 and float(one.split()[1]) == round(compiled, 1)


def test_summary_by_hand():
  rows = [("t::a", "jit(chunk)", 12.0), ("t::a", "jit(add)", 0.1), ("t::b", "jit(chunk)", 2.0)]
  lines = suite_compiles.summary(rows, {"t::a": 20.0, "t::b": 3.0, "t::c": 1.0})
  assert lines[0] == "in-process backend compiles: 3, 14.1 s; the tests' summed durations 24.0 s"
  assert lines[1] == "by duration (count, s): <0.2 s 1 0.1, 1-3 s 1 2.0, >10 s 1 12.0"
  assert lines[2] == "compiles over 1 s by program (s, count): jit(chunk) 14.0 (2)"
  assert lines[4:] == ["  20.00   12.1 t::a", "   3.00    2.0 t::b", "   1.00    0.0 t::c"]
