"""Entry point: ``python -m lasp_jax.main --config=configs/mnist5k.py [--workdir=DIR]``."""

import datetime
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from lasp_jax.errors import LaspError

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run configuration file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (default: a new folder under runs/).")


def default_workdir(config) -> str:
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  return os.path.join("runs", f"{config.dataset}_{config.method}_s{config.seed}_{stamp}")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO.
  from lasp_jax import train  # pylint: disable=g-import-not-at-top  (after flag parsing: fast --help)
  config = _CONFIG.value
  workdir = _WORKDIR.value or default_workdir(config)
  try:
    results = train.train_and_evaluate(config, workdir)
  except LaspError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  print(train.summary(results))
  print(f"results: {os.path.join(workdir, 'results.json')}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
