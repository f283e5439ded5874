"""The PyTorch side of ``python -m perf.benchmark --only=cpu_race``: one Co2L train step, timed.

    PY perf/torch_cpu_race.py --net=mnistnet --batch=256 --variant=loader [--steps=8]

Run with a python that has torch and torchvision (the reference runner's venv); the
project never imports torch. Written for this comparison, from the paper's
formulas, not taken from the published code. One step is what the published
Co2L code does per batch after task 0: two augmented views of ``batch`` images,
the current model's forward, the past model's forward (no grad), asymmetric
SupCon (current-task anchors) + IRD, backward, SGD with momentum and weight decay.

``--variant``:
  loader  the published way: a ``DataLoader`` (``--workers`` processes, 2 as the
          reference runner uses here) applying PIL/torchvision transforms per
          image (R-MNIST: fixed rotation, RandomResizedCrop(28, 0.7-1), ToTensor;
          CIFAR: RandomResizedCrop(32, 0.2-1), flip, ColorJitter p 0.8, grayscale
          p 0.2, normalize); time includes waiting for the loader.
  tensor  images already in memory as a uint8 tensor, both views made with
          batched torch ops (one affine grid per image: rotation x crop (x flip);
          CIFAR also brightness/contrast/saturation jitter and grayscale).
  tensor_cl  ``tensor`` with the models and the views in channels_last (oneDNN's convolutions run
          faster in it on this project's CPUs: BENCHMARKS.md, the layer race).

Prints one JSON line: {"net", "variant", "batch", "samples_per_s", "step_s", "threads"}.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

# Run as a script: this folder is on sys.path. The ResNet-18 model and the losses are the GPU reference's.
from torch_reference import co2l_model as resnet18  # noqa: E402  (after the setting above)
from torch_reference import ird, supcon
from torchvision import transforms


def mnist_net() -> torch.nn.Module:
  """conv5x5(20)-pool-conv5x5(50)-pool-fc500 encoder + 500-500-500 head (the R-MNIST model)."""
  return torch.nn.Sequential(
      torch.nn.Conv2d(1, 20, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
      torch.nn.Conv2d(20, 50, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
      torch.nn.Linear(800, 500), torch.nn.ReLU(),
      torch.nn.Linear(500, 500), torch.nn.ReLU(), torch.nn.Linear(500, 500))


class TwoViews:
  def __init__(self, t):
    self.t = t

  def __call__(self, x):
    return self.t(x), self.t(x)


class ImageSet(torch.utils.data.Dataset):
  """uint8 images in memory, served as PIL images through ``transform`` (as torchvision's MNIST/CIFAR do)."""

  def __init__(self, images, labels, transform):
    self.images, self.labels, self.transform = images, labels, transform

  def __len__(self):
    return len(self.images)

  def __getitem__(self, i):
    from PIL import Image  # noqa: PLC0415  (only the loader race needs Pillow)
    img = self.images[i]
    pil = Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img)
    return self.transform(pil), int(self.labels[i])


def pil_transform(net: str):
  if net == "mnistnet":
    angle = 37.0  # one task's fixed rotation
    return transforms.Compose([transforms.Lambda(lambda x: transforms.functional.rotate(x, angle)),
                               transforms.RandomResizedCrop(28, scale=(0.7, 1.0)), transforms.ToTensor()])
  return transforms.Compose([
      transforms.RandomResizedCrop(32, scale=(0.2, 1.0)), transforms.RandomHorizontalFlip(),
      transforms.RandomApply([transforms.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), transforms.RandomGrayscale(p=0.2),
      transforms.ToTensor(), transforms.Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))])


def tensor_views(x: torch.Tensor, net: str) -> torch.Tensor:
  """Two augmented views of a uint8 NHWC batch with batched ops: (2B, C, H, W) float."""
  x = x.permute(0, 3, 1, 2).float().div(255).repeat(2, 1, 1, 1)
  n = x.shape[0]
  lo = 0.7 if net == "mnistnet" else 0.2
  scale = torch.sqrt(torch.empty(n).uniform_(lo, 1.0))  # side of a square crop with area fraction in [lo, 1]
  shift = (1 - scale)[:, None] * torch.empty(n, 2).uniform_(-1, 1)
  angle = math.radians(37.0) if net == "mnistnet" else 0.0
  cos, sin = math.cos(angle), math.sin(angle)
  flip = torch.where(torch.rand(n) < 0.5, -1.0, 1.0) if net != "mnistnet" else torch.ones(n)
  theta = torch.zeros(n, 2, 3)
  theta[:, 0, 0], theta[:, 0, 1] = scale * cos * flip, -scale * sin
  theta[:, 1, 0], theta[:, 1, 1] = scale * sin * flip, scale * cos
  theta[:, :, 2] = shift
  grid = F.affine_grid(theta, list(x.shape), align_corners=False)
  x = F.grid_sample(x, grid, align_corners=False)
  if net != "mnistnet":
    jitter = (torch.rand(n, 1, 1, 1) < 0.8).float()
    b, c, s = (1 + jitter * torch.empty(n, 1, 1, 1).uniform_(-0.4, 0.4) for _ in range(3))
    x = x * b
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = (x - mean) * c + mean
    gray = (0.299 * x[:, :1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:]).expand_as(x)
    x = (gray + (x - gray) * s).clamp(0, 1)
    x = torch.where(torch.rand(n, 1, 1, 1) < 0.2, gray.clamp(0, 1), x)
    mean, std = torch.tensor([0.4914, 0.4822, 0.4465]), torch.tensor([0.2023, 0.1994, 0.2010])
    x = (x - mean[:, None, None]) / std[:, None, None]
  return x.contiguous()


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--net", choices=["mnistnet", "resnet18"], default="mnistnet")
  ap.add_argument("--variant", choices=["loader", "tensor", "tensor_cl"], default="loader")
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--steps", type=int, default=8)
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--workers", type=int, default=2)
  args = ap.parse_args()
  torch.manual_seed(0)
  shape = (28, 28, 1) if args.net == "mnistnet" else (32, 32, 3)
  n_images = args.batch * (args.steps + args.warmup)
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (n_images,) + shape, dtype=np.uint8)
  labels = rng.integers(0, 10, n_images)
  model = mnist_net() if args.net == "mnistnet" else resnet18()
  layout = torch.channels_last if args.variant == "tensor_cl" else torch.contiguous_format
  model = model.to(memory_format=layout)
  past = copy.deepcopy(model).eval()
  opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
  tau = 0.1 if args.net == "mnistnet" else 0.5
  normalize = args.net != "mnistnet"  # R-MNIST's head output is not L2-normalized in the published model

  def step(x, y):
    z = model(x)
    with torch.no_grad():
      zp = past(x)
    if normalize:
      z, zp = F.normalize(z, dim=1), F.normalize(zp, dim=1)
    loss = supcon(z, y, tau, current=y >= 5) + ird(z, zp)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()

  if args.variant == "loader":
    ds = ImageSet(images, labels, TwoViews(pil_transform(args.net)))
    batches = iter(torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                                               drop_last=True, persistent_workers=args.workers > 0))
    def next_batch():
      (v1, v2), y = next(batches)
      return torch.cat([v1, v2]), y
  else:
    data, ys = torch.from_numpy(images), torch.from_numpy(labels)
    it = iter(range(0, n_images, args.batch))
    def next_batch():
      i = next(it)
      return tensor_views(data[i:i + args.batch], args.net).contiguous(memory_format=layout), ys[i:i + args.batch]

  for _ in range(args.warmup):
    step(*next_batch())
  start = time.perf_counter()
  for _ in range(args.steps):
    step(*next_batch())
  step_s = (time.perf_counter() - start) / args.steps
  print(json.dumps(dict(net=args.net, variant=args.variant, batch=args.batch, samples_per_s=args.batch / step_s,
                        step_s=step_s, threads=torch.get_num_threads(), torch=torch.__version__)))


if __name__ == "__main__":
  main()
