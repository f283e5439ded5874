"""The raw-pixel baseline of a config, without training it.

    python -m experiments.raw_pixels --config=configs/rmnist.py [--config.seed=1]

Every run writes this baseline (``eval.raw_pixels``): a converged linear classifier
on the raw pixels of the final probe's data (the last task's data and the memory),
tested like the probe. It needs no trained model, only the memory, which is drawn
from the seed alone; so a run that left it out (a GPU run, where the float64 fit
on the host costs more than the training) gets it here, on the CPU, for the same
seed: the memory is advanced task by task without training (the ``finetune``
method, which keeps the memory and distills nothing), and the final readout is fit.
Prints one line of JSON.
"""

from __future__ import annotations

import json
import tempfile

from absl import flags, logging
from ml_collections import config_flags

from lasp_jax import config_lib, errors, train
from lasp_jax.eval import baselines, evaluators
from lasp_jax.loop import boundary, epochs


def raw_pixels(config) -> dict:
  """{"raw_pixels": accuracy per metric} of ``config``'s final probe data."""
  cfg = config_lib.override(baselines.baseline_config(config, "finetune"), num_seeds=1)
  with tempfile.TemporaryDirectory() as workdir:
    ctx, carry = train.build(cfg, workdir)
    last = ctx.stream.num_tasks - 1
    for t in range(1, last + 1):
      epochs.join_segment(ctx, carry, t - 1)
      boundary.open_segment(ctx, carry, t)  # the memory update alone: finetune distills nothing
    inputs = train.readout_inputs(ctx, carry)
    return {"raw_pixels": evaluators.raw_pixels(inputs, last, evaluators.probe_data(inputs, last))}


def define_flags() -> None:
  """The command's flags (defined only when it runs: tests import this module beside others)."""
  config_flags.DEFINE_config_file("config", None, "Run configuration file.", lock_config=True)


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  config = flags.FLAGS.config
  pixels = raw_pixels(config)  # a bad config value or missing data (LaspError): one line, errors.run_app
  print(json.dumps({"dataset": config.dataset, "seed": config.seed, "num_tasks": config.data.num_tasks,
                    "memory_size": config.memory.size, **pixels}))


if __name__ == "__main__":
  define_flags()
  flags.mark_flags_as_required(["config"])
  errors.run_app(main)
