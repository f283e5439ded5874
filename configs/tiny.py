"""Tiny configuration for tests and smoke runs: 5 tasks of 1,500 mnist5k digits, seconds on a CPU.

    python -m lasp_jax.main --config=configs/tiny.py --workdir=/tmp/tiny

A quarter-width R-MNIST net with BatchNorm, 16-d embeddings, 2 epochs per task under the
per-step cosine (every task trains from the full learning rate: the tests
check that later tasks learn), the converged L-BFGS readout as the probe. Head: not centred
(``model.head_center=False``, the default).
"""

from lasp_jax.default_config import base_config


def get_config():
  c = base_config()
  c.model.width = 0.25
  # 150 of the 400 training digits per class (a Split task 300 digits, a domain 1,500): the suite's runs train
  # every method end to end in a few seconds each.
  c.data.train_per_class = 150
  # BatchNorm, as the offline default: without it SD collapsed to one embedding in tasks 3-4 (gradient norm
  # 3e-4 against 3.18; Task-IL 90.6, below raw pixels' 94.0), so tests trained SD on a dead network.
  c.model.batch_norm = True
  c.model.embedding_dim = 16
  c.train.batch_size = 64
  c.train.epochs_first = 2
  c.train.epochs = 2
  c.train.lr = 0.05
  c.train.schedule = "step_cosine"
  c.train.steps_per_call = 1
  c.memory.size = 40
  c.lasp.restarts = 8
  c.lasp.steps = 10
  c.eval.probe = "lbfgs"
  c.eval.epochs = 3           # used when a test switches eval.probe to sgd
  c.eval.augment = False
  c.progress = False
  return c
