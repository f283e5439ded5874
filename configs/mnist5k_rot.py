"""Rotated MNIST5k (5 rotation domains, all digits each), Domain-IL, offline.

    python -m lasp_jax.main --config=configs/mnist5k_rot.py

R-MNIST's protocol (unnormalized 500-d embeddings, tau 0.1, SD searched on
``onlypast``) on the 4,000 bundled training digits with 5 domains instead of 20.
Runtime: a few minutes on 2 CPU cores. No paper number at this scale.
"""

from configs import rmnist


def get_config():
  c = rmnist.get_config()
  c.dataset = "mnist5k"
  c.data.source = "auto"
  c.data.num_tasks = 5
  c.train.batch_size = 256
  c.train.epochs_first = 15
  c.train.epochs = 5
  c.train.lr = 0.05
  c.train.steps_per_call = 4
  c.eval.epochs = 30
  c.eval.augment = False
  return c
