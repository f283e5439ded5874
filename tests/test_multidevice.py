"""The train step, mask search, EB and probe give the same results on 1 and 4 devices."""

import os
import pathlib
import subprocess
import sys

import numpy as np

from tests.conftest import xla_flags

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_one_device_equals_four_devices(tmp_path):
  env = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=4"), PYTHONPATH=str(REPO))
  out = subprocess.run([sys.executable, "tests/multidevice_check.py", str(tmp_path)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-4000:]
  z = np.load(tmp_path / "out.npz")
  keys = sorted(k[4:] for k in z.files if k.startswith("one_"))
  assert keys == sorted(k[5:] for k in z.files if k.startswith("four_"))  # nothing only one side has
  # params, BN statistics, every EB salience leaf, and the params of a vmapped 2-seed chunk are compared
  for prefix in ("p", "s", "g", "v"):
    assert any(k.startswith(prefix) and k[1:].isdigit() for k in keys), prefix
  for k in keys:
    if k == "mask":
      np.testing.assert_array_equal(z["one_mask"], z["four_mask"])
    else:
      np.testing.assert_allclose(z[f"one_{k}"], z[f"four_{k}"], rtol=2e-4, atol=2e-5, err_msg=k)
