"""One process of the 2-process x 2-CPU-device check run by test_multidevice.py.

    python tests/helpers/multiprocess_check.py OUT PROCESS_ID PORT

Each process sees 2 local CPU devices; ``jax.distributed.initialize`` joins them
into one 4-device ("data",) mesh, on which the same chunk of steps as
multidevice_check.py runs. Process 0 saves the trained weights and metrics.
"""

import os
import sys

from tests.conftest import xla_flags  # imports no jax: the flags below are set before jax loads

os.environ["XLA_FLAGS"] = xla_flags("--xla_force_host_platform_device_count=2")

import jax  # noqa: E402  (after the setting above)
import numpy as np  # noqa: E402  (after the setting above)


def main(out: str, process_id: int, port: int):
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
  # noqa below: multidevice_check builds its data at import, which would start the backend before initialize().
  from tests.helpers.multidevice_check import train_chunk  # noqa: PLC0415
  assert jax.device_count() == 4 and jax.local_device_count() == 2, jax.devices()
  trained, metrics = train_chunk(jax.devices(), out + "/multi")
  local = lambda x: np.asarray(x.addressable_data(0))  # replicated: every process holds the whole value
  if process_id == 0:
    flat = {f"p{i}": local(x) for i, x in enumerate(jax.tree.leaves(trained.params))}
    flat.update({f"s{i}": local(x) for i, x in enumerate(jax.tree.leaves(trained.batch_stats))})
    np.savez(out + "/multi.npz", metrics=local(metrics), **flat)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
