"""Tiny configuration for tests and smoke runs: 2 tasks of mnist5k, seconds on a CPU.

    python -m lasp_jax.main --config=configs/tiny.py --workdir=/tmp/tiny
"""

from lasp_jax.default_config import base_config


def get_config():
  c = base_config()
  c.dataset = "mnist5k"
  c.method = "sd"
  c.data.num_tasks = 5
  c.model.width = 0.25
  c.model.embedding_dim = 16
  c.train.batch_size = 64
  c.train.epochs_first = 1
  c.train.epochs = 1
  c.train.lr = 0.05
  c.train.steps_per_call = 1
  c.memory.size = 40
  c.lasp.restarts = 8
  c.lasp.steps = 10
  c.eval.epochs = 3
  c.eval.augment = False
  c.progress = False
  return c
