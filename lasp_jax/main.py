"""Entry point: ``python -m lasp_jax.main --config=configs/mnist5k.py [--workdir=DIR]``."""

import datetime
import os

from absl import flags, logging
from ml_collections import config_flags

from lasp_jax import config_lib, errors
from lasp_jax.method import registry
from lasp_jax.platform import cpu_kernels, host_memory

# Before JAX's backend starts: its threads take their malloc arenas then (host_memory.py).
host_memory.keep_freed_memory()

def define_flags() -> None:
  """The command line's flags (once per process; a test running the command in its own process defines and removes
  them around each call)."""
  if "workdir" in flags.FLAGS:
    return
  config_flags.DEFINE_config_file("config", None, "Run configuration file.", lock_config=True)
  flags.DEFINE_string("workdir", None, "Output folder (default: a new folder under runs/).")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla",
                      "Persistent XLA compilation cache ('' = off); reruns skip compilation.")
  flags.DEFINE_bool("multihost", False, "Call jax.distributed.initialize() (one process per host).")
  flags.DEFINE_bool("baselines", False, "Also run the method family's finetune (lower bound) and joint (upper "
                    "bound; ce_finetune, ce_joint for a cross-entropy method) with the same config, in "
                    "WORKDIR/baselines/, and print the comparison.")
  flags.mark_flags_as_required(["config"])


def default_workdir(config) -> str:
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  return os.path.join("runs", f"{config.dataset}_{config.method}_s{config.seed}_{stamp}")


USAGE = """usage: lasp-jax --config=FILE [--config.KEY=VALUE ...] [--workdir=DIR] [--baselines]

Trains one continual-learning run (or several seeds) and prints its accuracy matrices and final figures.

  --config=FILE            a config file, e.g. configs/mnist5k.py (offline), configs/rmnist.py, configs/cifar10.py
  --config.KEY=VALUE       override any key of it, e.g. --config.method=co2l, --config.seed=3,
                           --config.memory.size=500, --config.train.ird_weight=1
  --config.method=NAME     {methods}
  --config.num_seeds=N     seeds seed .. seed+N-1, each in WORKDIR/seed_<k>/, their mean (std) in WORKDIR/seeds.md
  --config.preset=published  every behaviour of the published code that lasp_jax fixes (docs/protocol.md)
  --config.data.validation_per_class=N  hold N training images per class out as a validation set
  --workdir=DIR            output folder (default: runs/<dataset>_<method>_s<seed>_<time>/); rerun to resume
  --baselines              also run the family's finetune (lower bound) and joint (upper bound), same config
  --compile_cache=DIR      persistent XLA compilation cache ('' = off; default ~/.cache/lasp_jax/xla)
  --multihost              one process per host over a shared --workdir (jax.distributed.initialize)
  --helpfull               every absl flag

example: lasp-jax --config=configs/mnist5k.py --baselines
         lasp-jax --config=configs/rmnist_cpu.py --config.method=co2l --config.num_seeds=3 --workdir=/tmp/co2l
         lasp-jax --config=configs/seq_mnist.py --config.method=derpp   (the DER paper's Split-MNIST protocol)
""".format(methods="\n                           ".join(f"{family}: {', '.join(names)}"
                                                   for family, names in registry.FAMILIES.items()))


def main(argv):
  del argv
  FLAGS = flags.FLAGS
  # Orbax logs every save at INFO, TFDS a WARNING line when it probes a data_dir: errors are one line.
  logging.set_verbosity(logging.ERROR)
  if FLAGS.multihost:
    import jax  # noqa: PLC0415  (only for several hosts; the config check below runs before jax loads)
    jax.distributed.initialize()  # coordinator, process count and id from the environment (SLURM, TPU, ...)
  config = FLAGS.config  # loaded by errors.parse_flags: a missing or broken file was one line there
  # A bad value is one line (errors.run_app) before the library (jax, flax, optax, scipy: ~3 s) loads; config_lib
  # has no jax.
  config_lib.validate(config_lib.resolved(config))
  cpu_kernels.set_process_flags(config.model.name)  # before jax starts its backend
  from lasp_jax import cli  # noqa: PLC0415  (jax loads here, after the config check)
  cli.run_command(config, FLAGS.workdir or default_workdir(config), baselines=FLAGS.baselines,
                  compile_cache=FLAGS.compile_cache)


def run():
  """The ``lasp-jax`` console script: the same as ``python -m lasp_jax.main``."""
  define_flags()
  errors.run_app(main, USAGE)


if __name__ == "__main__":
  run()
