"""Where a number came from: the host CPU line that CPU figures carry, the XLA flags a run ran under."""

import os
import subprocess

from lasp_jax import provenance

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx fma avx2 bmi2

processor\t: 1
model name\t: something else
"""


def test_cpu_model_names_the_family_and_the_widest_simd():
  assert provenance.cpu_model(EPYC) == "AMD EPYC (family 23 model 1; avx2)"
  xeon = EPYC.replace("AMD EPYC", "Intel Xeon").replace("avx2 bmi2", "avx2 avx512f amx_tile")
  assert provenance.cpu_model(xeon).endswith("; avx512, amx)")
  assert provenance.cpu_model("model name\t: Old\nflags\t\t: sse sse2\n") == "Old (family ? model ?; sse)"


def test_results_provenance_carries_the_cpu():
  assert provenance.provenance()["cpu"] == provenance.cpu_model()


def test_provenance_names_the_xla_flags_the_process_runs_under():
  # conftest sets the single-thread Eigen flag in xdist workers: a flag that changes a run's float path.
  assert provenance.provenance()["xla_flags"] == os.environ.get("XLA_FLAGS", "")


def test_a_run_is_dirty_when_code_differs_from_the_commit_not_its_results_files(tmp_path):
  git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)
  git("init", "-q")
  (tmp_path / "results").mkdir()
  (tmp_path / "results" / "table.md").write_text("a\n")
  (tmp_path / "code.py").write_text("x = 1\n")
  git("add", ".")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
  assert provenance.code_dirty(tmp_path) is False
  (tmp_path / "results" / "table.md").write_text("b\n")  # a study rewriting its own table while it runs
  assert provenance.code_dirty(tmp_path) is False
  (tmp_path / "code.py").write_text("x = 2\n")
  assert provenance.code_dirty(tmp_path) is True
  assert provenance.code_dirty(tmp_path / "nowhere") is None
