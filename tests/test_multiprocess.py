"""The multi-host path: 2 processes x 2 CPU devices (jax.distributed) == 1 process x 4 devices."""

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

from tests.conftest import xla_flags

REPO = pathlib.Path(__file__).resolve().parents[1]

SINGLE = """
import sys, jax, numpy as np
from tests.multidevice_check import train_chunk
state, metrics = train_chunk(jax.devices(), sys.argv[1] + "/single")
flat = {f"p{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(state.params))}
flat.update({f"s{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(state.batch_stats))})
np.savez(sys.argv[1] + "/single.npz", metrics=np.asarray(metrics), **flat)
"""


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_two_processes_train_a_chunk_as_one_process_with_four_devices(tmp_path):
  env = dict(os.environ, PYTHONPATH=str(REPO))
  port = _free_port()
  procs = [subprocess.Popen([sys.executable, "tests/multiprocess_check.py", str(tmp_path), str(i), str(port)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-4000:]
  single = subprocess.run([sys.executable, "-c", SINGLE, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          env=dict(env, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=4")), timeout=600)
  assert single.returncode == 0, single.stderr[-4000:]
  multi, one = np.load(tmp_path / "multi.npz"), np.load(tmp_path / "single.npz")
  assert sorted(multi.files) == sorted(one.files) and any(k.startswith("s") for k in one.files)
  for k in one.files:
    np.testing.assert_allclose(multi[k], one[k], rtol=2e-4, atol=2e-5, err_msg=k)
