"""Same-card PyTorch reference for the train-step row of ``perf/benchmark.py``.

    python -m perf.torch_reference [--batch=512] [--repeats=10]

Not part of the library and not a dependency: it needs torch and torchvision and
runs where they are installed (e.g. a GPU machine with both). It times what the
published Co2L code does per step, on the GPU only: torchvision's ResNet-18 with the
CIFAR stem (3x3 conv, stride 1, no max-pool) and the 512-512-128 head, two views of
``batch`` images, SupCon (tau 0.5) on the current model and IRD against the past
model's forward, backward, SGD with momentum. Data loading and augmentation, which
the published code does on CPU workers, are not timed: that favours PyTorch.
Prints fp32 (TF32 matmuls/convs allowed, PyTorch's cudnn default) and bf16 autocast.
"""

from __future__ import annotations

import argparse
import copy
import json

import torch
import torch.nn.functional as F
import torchvision


def co2l_model() -> torch.nn.Module:
  net = torchvision.models.resnet18(num_classes=10)
  net.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
  net.maxpool = torch.nn.Identity()
  net.fc = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(inplace=True), torch.nn.Linear(512, 128))
  return net


def supcon(z, labels, temperature=0.5, base_temperature=0.07, current=None):
  """SupCon of Co2L over 2B views; ``current`` (B,) bool picks the anchors (default: every anchor, the costliest
  case)."""
  n = z.shape[0]
  labels = labels.repeat(2)
  logits = z @ z.T / temperature
  logits = logits - logits.max(dim=1, keepdim=True).values.detach()
  self_mask = ~torch.eye(n, dtype=torch.bool, device=z.device)
  pos = (labels[:, None] == labels[None, :]) & self_mask
  exp = torch.exp(logits) * self_mask
  log_prob = logits - torch.log(exp.sum(1, keepdim=True))
  per_anchor = -(temperature / base_temperature) * (pos * log_prob).sum(1) / pos.sum(1).clamp(min=1)
  return per_anchor.mean() if current is None else per_anchor[current.repeat(2)].mean()


def ird(z, z_past, t_cur=0.2, t_past=0.01):
  n = z.shape[0]
  off = ~torch.eye(n, dtype=torch.bool, device=z.device)
  log_cur = F.log_softmax((z @ z.T / t_cur).masked_select(off).view(n, n - 1), dim=1)
  past = F.softmax((z_past @ z_past.T / t_past).masked_select(off).view(n, n - 1), dim=1)
  return (-past * log_cur).sum(1).mean()


def time_step(batch: int, repeats: int, amp: bool) -> float:
  dev = torch.device("cuda")
  torch.backends.cudnn.benchmark = True
  model = co2l_model().to(dev).to(memory_format=torch.channels_last)
  past = copy.deepcopy(model).eval()
  opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
  x = torch.randn(2 * batch, 3, 32, 32, device=dev).to(memory_format=torch.channels_last)
  labels = torch.arange(batch, device=dev) % 10

  def step():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
      z = F.normalize(model(x).float(), dim=1)
      with torch.no_grad():
        zp = F.normalize(past(x).float(), dim=1)
      loss = supcon(z, labels) + ird(z, zp)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss

  for _ in range(3):
    step()
  torch.cuda.synchronize()
  times = []
  for _ in range(repeats):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end) / 1000)
  return sorted(times)[len(times) // 2]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--batch", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--out", default="torch_reference.json")
  args = parser.parse_args()
  torch.backends.cuda.matmul.allow_tf32 = True
  torch.backends.cudnn.allow_tf32 = True
  rows = []
  for amp in (False, True):
    med = time_step(args.batch, args.repeats, amp)
    rows.append(dict(component=f"PyTorch train step ResNet-18 {'bf16 autocast' if amp else 'fp32 (tf32)'}",
                     shape=f"batch {args.batch} (x2 views) 32x32", median_s=round(med, 4),
                     throughput=f"{args.batch / med:.1f} samples/s"))
  print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__})")
  for r in rows:
    print(f"{r['component']:48} {r['shape']:32} {r['median_s']:>10}  {r['throughput']}")
  with open(args.out, "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
  main()
