"""The PyTorch side of ``python -m perf.layer_race``: the race step's layers alone, timed.

    PY perf/torch_layer_race.py [--net=mnistnet|resnet18] [--batch=512] [--repeats=7]

Run with a python that has torch and torchvision (the project never imports them). The layers are the race's
models' (``torch_cpu_race``), one at a time: the R-MNIST net's conv1, conv2 (each conv, ReLU, 2x2 max-pool), fc
(800->500, ReLU) and head (500-500-500); ResNet-18's stem (conv, BatchNorm, ReLU), layer1-4 and head (average
pool, 512-512-128, L2 normalization); then the loss (SupCon over the current task's anchors + IRD). A layer's time
is the median of its forward and backward on 2B rows (the input gradient too, except the first layer's) plus the
median of its forward without gradient in eval mode (the past model's, as the race runs it); the loss has no past
part. Layers on images run in NCHW and in channels_last; the faster counts. Prints one JSON line:
{"ms": {layer: ms}, "layout": {layer: the faster layout}}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch_cpu_race import mnist_net  # run as a script: this folder is on sys.path
from torch_reference import co2l_model, ird, supcon


class Normalized(torch.nn.Module):
  def __init__(self, head):
    super().__init__()
    self.head = head

  def forward(self, x):
    return F.normalize(self.head(x), dim=1)


def layers(net: str) -> dict:
  """{layer: (module, input shape without rows)}, as perf/layer_race.py cuts the net."""
  if net == "mnistnet":
    m = mnist_net()
    return {"conv1": (m[0:3], (1, 28, 28)), "conv2": (m[3:6], (20, 12, 12)), "fc": (m[6:9], (50, 4, 4)),
            "head": (m[9:12], (500,))}
  m = co2l_model()
  head = Normalized(torch.nn.Sequential(m.avgpool, torch.nn.Flatten(), m.fc))
  return {"stem": (torch.nn.Sequential(m.conv1, m.bn1, m.relu), (3, 32, 32)), "layer1": (m.layer1, (64, 32, 32)),
          "layer2": (m.layer2, (64, 32, 32)), "layer3": (m.layer3, (128, 16, 16)),
          "layer4": (m.layer4, (256, 8, 8)), "head": (head, (512, 4, 4))}


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
  train_ms = median_ms(train, repeats)
  layer.eval()
  past_ms = median_ms(past, repeats)
  layer.train()
  return train_ms + past_ms


def best_layout_ms(layer: torch.nn.Module, x: torch.Tensor, input_grad: bool, repeats: int) -> tuple[float, str]:
  """(ms, layout): the faster of NCHW and channels_last for a layer on images (oneDNN's convolutions run several
  times faster in channels_last on some of these shapes, slower on others); other layers as they are."""
  times = {"nchw": layer_ms(layer, x.clone(), input_grad, repeats)}
  if x.dim() == 4:
    cl = torch.channels_last
    times["channels_last"] = layer_ms(layer.to(memory_format=cl), x.contiguous(memory_format=cl), input_grad,
                                      repeats)
  layout = min(times, key=times.get)
  return times[layout], layout


def loss_ms(batch: int, dim: int, tau: float, repeats: int) -> float:
  z, zp = torch.randn(2 * batch, dim, requires_grad=True), torch.randn(2 * batch, dim)
  labels = torch.randint(0, 10, (batch,))

  def train():
    z.grad = None
    (supcon(z, labels, tau, current=labels >= 5) + ird(z, zp)).backward()
  return median_ms(train, repeats)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--net", choices=["mnistnet", "resnet18"], default="mnistnet")
  ap.add_argument("--batch", type=int, default=512)
  ap.add_argument("--repeats", type=int, default=7)
  args = ap.parse_args()
  torch.manual_seed(0)
  ms, layout = {}, {}
  for i, (name, (layer, shape)) in enumerate(layers(args.net).items()):
    ms[name], layout[name] = best_layout_ms(layer, torch.randn(2 * args.batch, *shape), i > 0, args.repeats)
  dim, tau = (500, 0.1) if args.net == "mnistnet" else (128, 0.5)  # the race's embedding and SupCon tau
  ms["loss"] = loss_ms(args.batch, dim, tau, args.repeats)
  print(json.dumps({"ms": ms, "layout": layout}))


if __name__ == "__main__":
  main()
