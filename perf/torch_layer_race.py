"""The PyTorch side of ``python -m perf.layer_race``: the R-MNIST race step's layers alone, timed.

    PY perf/torch_layer_race.py [--batch=512] [--repeats=7]

Run with a python that has torch (the project never imports it). The layers are ``torch_cpu_race.mnist_net``'s,
one at a time: conv1, conv2 (each conv, ReLU, 2x2 max-pool), fc (800->500, ReLU), the head (500-500-500), and the
loss (SupCon over the current task's anchors + IRD). A layer's time is the median of its forward and backward on
2B rows (the input gradient too, except conv1's) plus its forward without gradient (the past model's); the loss
has no past part. Prints one JSON line: {layer: ms}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch_cpu_race import mnist_net  # run as a script: this folder is on sys.path
from torch_reference import ird, supcon

LAYER_SLICES = {"conv1": (0, 3), "conv2": (3, 6), "fc": (6, 9), "head": (9, 12)}
INPUTS = {"conv1": (1, 28, 28), "conv2": (20, 12, 12), "fc": (50, 4, 4), "head": (500,)}


def median_ms(fn, repeats: int) -> float:
  fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times) * 1e3


def layer_ms(layer: torch.nn.Module, x: torch.Tensor, input_grad: bool, repeats: int) -> float:
  x = x.requires_grad_(input_grad)
  g = torch.ones_like(layer(x))

  def train():
    layer.zero_grad(set_to_none=True)
    x.grad = None
    layer(x).backward(g)

  def past():
    with torch.no_grad():
      layer(x)
  return median_ms(train, repeats) + median_ms(past, repeats)


def loss_ms(batch: int, repeats: int) -> float:
  z, zp = torch.randn(2 * batch, 500, requires_grad=True), torch.randn(2 * batch, 500)
  labels = torch.randint(0, 10, (batch,))

  def train():
    z.grad = None
    (supcon(z, labels, 0.1, current=labels >= 5) + ird(z, zp)).backward()
  return median_ms(train, repeats)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=512)
  ap.add_argument("--repeats", type=int, default=7)
  args = ap.parse_args()
  torch.manual_seed(0)
  net = mnist_net()
  out = {name: layer_ms(net[a:b], torch.randn(2 * args.batch, *INPUTS[name]), name != "conv1", args.repeats)
         for name, (a, b) in LAYER_SLICES.items()}
  out["loss"] = loss_ms(args.batch, args.repeats)
  print(json.dumps(out))


if __name__ == "__main__":
  main()
