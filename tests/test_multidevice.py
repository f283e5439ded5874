"""The train step, mask search, EB and probe give the same results on 1 and 4 devices; a chunk trained by
2 processes x 2 CPU devices (jax.distributed, the multi-host path) equals the 1-process 4-device one."""

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import xla_flags

REPO = pathlib.Path(__file__).resolve().parents[1]

# One xdist worker for this module (`--dist loadgroup`): both tests read the module fixture's 1- and 4-device run.
pytestmark = pytest.mark.xdist_group("multidevice")


@pytest.fixture(scope="module")
def one_and_four(tmp_path_factory):
  """multidevice_check.py's results: ``one_*`` on a 1-device mesh, ``four_*`` on a 4-device mesh."""
  out_dir = tmp_path_factory.mktemp("multidevice")
  env = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=4"), PYTHONPATH=str(REPO))
  out = subprocess.run([sys.executable, "tests/helpers/multidevice_check.py", str(out_dir)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-4000:]
  return dict(np.load(out_dir / "out.npz"))


def test_one_device_equals_four_devices(one_and_four):
  z = one_and_four
  keys = sorted(k[4:] for k in z if k.startswith("one_"))
  assert keys == sorted(k[5:] for k in z if k.startswith("four_"))  # nothing only one side has
  # params, BN statistics, every EB salience leaf, and the params of a 2-seed chunk (vmapped on 4 devices, seed by
  # seed on 1) are compared
  for prefix in ("p", "s", "g", "v"):
    assert any(k.startswith(prefix) and k[1:].isdigit() for k in keys), prefix
  for k in keys:
    if k == "mask":
      np.testing.assert_array_equal(z["one_mask"], z["four_mask"])
    else:
      np.testing.assert_allclose(z[f"one_{k}"], z[f"four_{k}"], rtol=2e-4, atol=2e-5, err_msg=k)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_two_processes_train_a_chunk_as_one_process_with_four_devices(one_and_four, tmp_path):
  env = dict(os.environ, PYTHONPATH=str(REPO))
  port = _free_port()
  procs = [subprocess.Popen([sys.executable, "tests/helpers/multiprocess_check.py", str(tmp_path), str(i), str(port)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-4000:]
  multi = np.load(tmp_path / "multi.npz")
  # The same chunk (multidevice_check.train_chunk) that the fixture trained on one process's 4 devices:
  # the same params, BN statistics and metrics, nothing only one side has.
  four = [k[5:] for k in one_and_four if k.startswith("four_")]
  chunk_keys = sorted(k for k in four if k == "metrics" or (k[0] in "ps" and k[1:].isdigit()))
  assert sorted(multi.files) == chunk_keys and any(k.startswith("s") for k in chunk_keys)
  for k in multi.files:
    np.testing.assert_allclose(multi[k], one_and_four[f"four_{k}"], rtol=2e-4, atol=2e-5, err_msg=k)
