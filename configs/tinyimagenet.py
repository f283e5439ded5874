"""Split-TinyImageNet (10 tasks x 20 classes), Class-IL + Task-IL.

    python -m lasp_jax.tools.prepare --dataset=tiny_imagenet --data_dir=data   # once, needs a network
    python -m lasp_jax.main --config=configs/tinyimagenet.py --config.data.data_dir=data \
        [--config.method=co2l]

Published hyperparameters: the CIFAR ResNet-18 at 64 px, batch 512, lr 0.1, 10
warm-up epochs, 500 epochs on task 0 and 50 later, SupCon tau 0.5, IRD eta 0.1 /
0.1, D = 512 for SD/GM/SD+GM but 128 for the Co2L baseline, RandomResizedCrop
scale (0.1, 1) plus Gaussian blur (p 0.5); probe lr 0.1.
Head: the published projection head, output L2-normalized and not centred (``model.head_center=False``).

Expected runtime: not measured on a GPU; roughly 4x the CIFAR-10 run per epoch
(64 px), so a few hours on one H100 (projection).

Paper (Table 1), Class-IL / Task-IL:
  memory 200: Co2L 13.88 (0.40) / 42.37 (0.74)   SD 16.02 (0.39) / 44.07 (0.66)
              GM   12.46 (0.43) / 38.33 (0.90)   SD+GM 12.93 (0.55) / 38.47 (0.68)
  memory 500: Co2L 20.12 (0.42) / 53.04 (0.69)   SD 21.49 (0.50) / 52.69 (0.45)
              GM   17.54 (0.44) / 48.21 (0.54)   SD+GM 19.01 (0.31) / 48.06 (0.71)
"""

from configs import cifar10


def get_config():
  c = cifar10.get_config()
  c.dataset = "tiny_imagenet"
  c.data.num_tasks = 10
  c.model.embedding_dim = 0      # 0: as published per method, 128 for Co2L (and the baselines), 512 for SD/GM/SD+GM
  c.augment.size = 64
  c.augment.crop_scale = (0.1, 1.0)
  c.augment.blur_p = 0.5
  c.augment.mean = (0.4802, 0.4480, 0.3975)
  c.augment.std = (0.2770, 0.2691, 0.2821)
  c.train.epochs_first = 500
  c.train.epochs = 50
  c.train.lr = 0.1
  c.train.ird_temp_cur = 0.1
  c.train.ird_temp_past = 0.1
  c.eval.lr = 0.1
  return c
