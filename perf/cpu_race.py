"""lasp_jax's train step against the same step in PyTorch, in one run on this machine.

    python -m perf.benchmark --only=cpu_race --torch_python=PY [--race_mnist_batch=256]

For each net (the R-MNIST net at batch 256, ResNet-18 at a CPU-sized batch) it
times lasp_jax's compiled train step with the past model (two views augmented on
the device, SupCon + IRD, SGD), then runs ``perf/torch_cpu_race.py`` under
``PY`` three times: the published way (DataLoader workers, PIL transforms), with the
images in memory augmented by batched torch ops, and the same in channels_last (oneDNN's
convolutions run faster in it here). The PyTorch processes run one at
a time after lasp_jax's timing, so neither side shares the two cores with the
other. Each ratio is lasp_jax samples/s over the faster PyTorch variant.

Beside the ratios, the roofline of each net (``perf/roofline.py``): GFLOP per sample
of the step, each side's GFLOP/s, this machine's float32 matmul rate (``matmul_peak_gflops``,
measured first) and ``{net}_ratio_ceiling``, the ratio a step running entirely at that rate
would have against the faster PyTorch variant.
"""

from __future__ import annotations

import json
import subprocess
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from configs import cifar10, rmnist
from lasp_jax import errors, train
from lasp_jax.loop import steps
from lasp_jax.method import pools
from perf import roofline

NETS = {"mnistnet": "configs/rmnist.py", "resnet18": "configs/cifar10.py"}


def race_config(net: str, batch: int, steps_per_call: int) -> ml_collections.ConfigDict:
  """The net's paper config as Co2L on random images of the dataset's shape."""
  c = (rmnist if net == "mnistnet" else cifar10).get_config()
  shape = (28, 1) if net == "mnistnet" else (32, 3)
  c.dataset, c.method, c.progress = "synthetic", "co2l", False
  c.data.num_tasks = 2 if net == "mnistnet" else 5
  # Task 0 holds a whole chunk: no step of the timed chunk is padding, which the compiled loop would
  # skip (steps.chunk_body).
  per_class = max(-(-batch * steps_per_call // (10 // c.data.num_tasks)), 8)
  c.data.synthetic = ml_collections.ConfigDict(dict(num_classes=10, image_size=shape[0], channels=shape[1],
                                                    train_per_class=per_class, test_per_class=2))
  c.model.embedding_dim = 500 if net == "mnistnet" else 128
  c.train.batch_size, c.train.steps_per_call = batch, steps_per_call
  c.memory.size = 20
  return c


def race_chunk(net: str, batch: int, steps_per_call: int, **overrides):
  """The race's run and one chunk of its task-0 batches: (ctx, carry, chunk, mask, lrs, past model).

  ``overrides``: top-level config keys to change (e.g. ``compute_dtype="bfloat16"``).
  """
  c = race_config(net, batch, steps_per_call)
  c.update(overrides)
  ctx, carry = train.build(c, tempfile.mkdtemp())
  pool = pools.training_pool(ctx.stream, carry.memory, 0)
  chunk = steps.Batch(*[jax.device_put(f[0], ctx.batch_sharding)
                        for f in steps.epoch_batches(pool, batch, steps_per_call, np.random.default_rng(0))])
  if not bool(jnp.all(chunk.valid)):
    raise RuntimeError("the timed chunk holds padding: a race would count steps that do not run")
  mask = jnp.ones(c.model.embedding_dim, bool)
  lrs = jnp.full((steps_per_call,), c.train.lr)
  past = steps.PastModel(*jax.tree.map(jnp.copy, (carry.state.params, carry.state.batch_stats)))
  return ctx, carry, chunk, mask, lrs, past


def chunk_call(net: str, batch: int, steps_per_call: int, **overrides):
  """A no-argument function that runs one compiled chunk with the past model (IRD) and waits for it."""
  return call_of(*race_chunk(net, batch, steps_per_call, **overrides))


def call_of(ctx, carry, chunk, mask, lrs, past):
  """``chunk_call``'s function for a race chunk already built (``race_chunk``'s six values)."""
  def call():
    carry.state, m = ctx.chunk_fn(carry.state, past, mask, carry.data, chunk, lrs)  # the state is donated
    jax.block_until_ready(m)
  return call


def jax_step_seconds(net: str, batch: int, steps_per_call: int, repeats: int, **overrides) -> float:
  """Median seconds of one compiled train step with the past model (IRD), augmentation included."""
  call = chunk_call(net, batch, steps_per_call, **overrides)
  return roofline.median_seconds(call, (), repeats) / steps_per_call


def step_gflop(net: str, batch: int) -> float:
  """GFLOP (matmuls and convolutions) of one race step, counted from its traced program.

  Traced with ``model.conv_backward="xla"``: plain convolutions and JAX's own gradients, the
  arithmetic the PyTorch step does too (conv.py's one-channel conv1 does 2.4x its FLOPs as a
  Toeplitz matmul, which would credit lasp_jax with work PyTorch does not need). Nothing compiles.
  """
  ctx, carry, chunk, mask, lrs, past = race_chunk(net, batch, 1, model=dict(conv_backward="xla"))
  traced = ctx.chunk_fn.trace(carry.state, past, mask, carry.data, chunk, lrs)
  return roofline.jaxpr_flops(traced.jaxpr) / 1e9


def torch_json(cmd: list) -> dict:
  """The last stdout line, as JSON, of a PyTorch-side script (``cmd``: its python, the script and its flags)."""
  out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if out.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip().splitlines()[-1:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def torch_samples_per_s(python: str, net: str, variant: str, batch: int, steps_n: int) -> dict:
  return torch_json([python, "perf/torch_cpu_race.py", f"--net={net}", f"--variant={variant}", f"--batch={batch}",
                     f"--steps={steps_n}", "--warmup=1" if net == "resnet18" else "--warmup=2"])


def race(torch_python: str, mnist_batch: int = 256, resnet_batch: int = 32, quick: bool = False) -> dict:
  """Rows for the benchmark table and the summary dict (its last printed line)."""
  plan = {"mnistnet": (mnist_batch, 8, 4), "resnet18": (resnet_batch, 3, 1)}
  if quick:
    plan = {"mnistnet": (32, 2, 2), "resnet18": (4, 1, 1)}
  rows, summary = [], {}
  # This machine's ceiling, measured in the same run: a step whose every FLOP ran at the rate of a
  # 2048^3 float32 matmul (perf/roofline.py). A ratio target above {net}_ratio_ceiling cannot be met.
  peak = summary["matmul_peak_gflops"] = round(roofline.matmul_peak_gflops(), 1)
  for net, (batch, torch_steps, spc) in plan.items():
    jax_sps = batch / jax_step_seconds(net, batch, spc, repeats=3 if net == "mnistnet" else 2)
    rows.append(dict(component=f"cpu race {net}: lasp_jax step (+past, aug)", shape=f"batch {batch}",
                     median_s=round(batch / jax_sps, 4), throughput=f"{jax_sps:.1f} samples/s"))
    best = 0.0
    for variant in ("loader", "tensor", "tensor_cl"):
      r = torch_samples_per_s(torch_python, net, variant, batch, torch_steps)
      rows.append(dict(component=f"cpu race {net}: PyTorch {variant}", shape=f"batch {batch}",
                       median_s=round(r["step_s"], 4), throughput=f"{r['samples_per_s']:.1f} samples/s"))
      summary[f"{net}_ratio_vs_{variant}"] = round(jax_sps / r["samples_per_s"], 3)
      summary[f"{net}_torch_{variant}_samples_per_s"] = round(r["samples_per_s"], 1)
      best = max(best, r["samples_per_s"])
      summary["torch"] = r["torch"]
    summary[f"{net}_jax_samples_per_s"] = round(jax_sps, 1)
    summary[f"{net}_ratio"] = round(jax_sps / best, 3)
    gflop = step_gflop(net, batch) / batch
    summary[f"{net}_gflop_per_sample"] = round(gflop, 4)
    summary[f"{net}_jax_gflops"] = round(jax_sps * gflop, 1)
    summary[f"{net}_torch_gflops"] = round(best * gflop, 1)
    summary[f"{net}_ratio_ceiling"] = round(peak / gflop / best, 3)
  summary["jax"] = jax.__version__
  return rows, summary


if __name__ == "__main__":
  # the race runs from perf.benchmark; this entry is for one machine by hand
  torch_python, *quick = errors.script_args(1, "python -m perf.cpu_race TORCH_PYTHON [quick]", optional=1)
  print(json.dumps(race(torch_python, quick=bool(quick))[1]))
