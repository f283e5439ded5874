"""The read-out after the last task of a config, timed: its test-feature extraction and the L-BFGS read-out.

    python -m perf.readout [--config=configs/rmnist_cpu.py] [--out=FILE.json]

Builds the run (an untrained network: the read-out's time does not depend on the weights), then times
``evaluators.probe_data`` (every seen domain's test digits through the encoder) and ``evaluators.lbfgs_readout``
(the training rows' features, the logistic-regression fit, the test scoring) for the last task, each once after
a warm-up call that compiles. One run, one machine: figures to compare, not to assert.
"""

import tempfile
import time

from absl import flags
from ml_collections import config_flags

from lasp_jax import config_lib, errors, provenance, train
from lasp_jax.eval import evaluators
from lasp_jax.loop.checkpoint import write_json_atomic
from lasp_jax.platform import xla_cache

_CONFIG = config_flags.DEFINE_config_file("config", "configs/rmnist_cpu.py", "The run's configuration.")
_OUT = flags.DEFINE_string("out", "", "JSON output (optional).")


def timed(fn, *args) -> tuple[float, object]:
  fn(*args)  # compiles
  t0 = time.perf_counter()
  out = fn(*args)
  return time.perf_counter() - t0, out


def main(argv):
  del argv
  xla_cache.enable("~/.cache/lasp_jax/xla")
  config = config_lib.override(_CONFIG.value, progress=False, pictures=False)
  ctx, carry = train.build(config, tempfile.mkdtemp())
  last = ctx.stream.num_tasks - 1
  features_s, pd = timed(evaluators.probe_data, train.readout_inputs(ctx, carry), last)
  readout_s, _ = timed(evaluators.lbfgs_readout, train.readout_inputs(ctx, carry), last, pd)
  out = {"test_features_s": round(features_s, 2), "lbfgs_readout_s": round(readout_s, 2),
         "test_rows": int(pd.test_label.shape[0]), "provenance": provenance.provenance()}
  print(f"test features {features_s:.2f} s ({out['test_rows']} rows), L-BFGS read-out {readout_s:.2f} s, "
        f"together {features_s + readout_s:.2f} s")
  if _OUT.value:
    write_json_atomic(_OUT.value, out)


if __name__ == "__main__":
  errors.run_app(main)
