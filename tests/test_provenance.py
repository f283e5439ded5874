"""Where a number came from: the host CPU line that CPU figures carry, the XLA flags a run ran under."""

import os

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
