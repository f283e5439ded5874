"""Layer race: each layer of the race's train step alone, in lasp_jax and in PyTorch (oneDNN), on this machine.

    python -m perf.layer_race --torch_python=PY [--net=mnistnet|resnet18] [--batch=N] [--out=FILE.json]

The step (perf/cpu_race.py, batch B, two views: 2B rows) splits into layers. The R-MNIST net (batch 512): conv1
(5x5 1->20, ReLU, 2x2 pool), conv2 (5x5 20->50, ReLU, pool), fc (800->500, ReLU), the head (500-500-500) and the
loss (SupCon + IRD). ResNet-18 (batch 32): the stem (3x3 conv, BatchNorm, ReLU), its four stages of two
BasicBlocks, the head (average pool, 512-512-128, L2 normalization) and the loss. A layer's share of the step is
its forward and backward on the current model (the input gradient too, except the first layer's, whose input is
the image) plus its forward on the past model (no gradient; BatchNorm in each side's race mode: lasp_jax's
``model.past_bn``, PyTorch's eval mode); the loss has no past part. Each layer runs alone, compiled with the step's
XLA options and kernels, on random inputs of its shapes; the same layers run in PyTorch under ``PY``
(``perf/torch_layer_race.py``, after lasp_jax's timing, so neither shares the cores with the other; each layer on
images in NCHW and in channels_last, the faster counting). Printed per
layer: its FLOPs, its roofline bound (each instruction of lasp_jax's compiled programs at max(FLOPs / matmul
rate, least bytes / stream bandwidth), both measured in the same run), each side's time, the faster one and the
rate it reaches; then the step's share of the matmul rate as it runs, as its layers add up alone, with every
layer at the faster of the two, and with every lasp_jax layer at its bound. The third is what this machine's
kernels allow these layer shapes: if it is below a target, no choice between these two libraries' kernels meets
it. One run, one machine: figures to compare, not to assert.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags, logging
from flax import linen as nn

from lasp_jax import errors, provenance
from lasp_jax.loop.checkpoint import write_json_atomic
from lasp_jax.method import losses
from lasp_jax.model import conv, models
from lasp_jax.platform import cpu_kernels, xla_cache
from perf import cpu_race, hlo_cost, roofline

LAYERS = {"mnistnet": ("conv1", "conv2", "fc", "head", "loss"),
          "resnet18": ("stem", "layer1", "layer2", "layer3", "layer4", "head", "loss")}


def define_flags():
  """The command line; defined only when run as a script (perf's other scripts, imported beside this module in
  one process, define the same names)."""
  flags.DEFINE_enum("net", "mnistnet", list(LAYERS), "The network of the step.")
  flags.DEFINE_string("torch_python", "", "A python with torch (the PyTorch side); empty: lasp_jax only.")
  flags.DEFINE_integer("batch", 0, "Images per step (two views each); 0: 512 for mnistnet, 32 for resnet18.",
                       lower_bound=0)
  flags.DEFINE_integer("repeats", 7, "Timed calls per layer; the median counts.", lower_bound=1)
  flags.DEFINE_string("out", "", "JSON output (optional).")


class ConvPool(nn.Module):
  """The R-MNIST net's 5x5 convolution, ReLU and 2x2 pool (models.MnistNet without BatchNorm), named as there."""
  features: int
  layer: str
  conv_fn: Any = None

  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.Conv(self.features, (5, 5), padding=((0, 0), (0, 0)), conv_general_dilated=self.conv_fn,
                name=self.layer)(x)
    return models.relu_pool(x, train)


class DenseRelu(nn.Module):
  features: int

  @nn.compact
  def __call__(self, x, train: bool):
    del train
    return nn.relu(nn.Dense(self.features, name="fc")(x.reshape(x.shape[0], -1)))


class Stem(nn.Module):
  """ResNet's 3x3 convolution, BatchNorm and ReLU (models.ResNet's first layers), named as there."""
  features: int
  conv_fn: Any = None
  bn_groups: int = 1

  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.Conv(self.features, (3, 3), 1, padding=1, use_bias=False, conv_general_dilated=self.conv_fn,
                name="conv1")(x)
    return nn.relu(models.norm_layer(train, "bn1", jnp.float32, self.bn_groups)(x))


class Stage(nn.Module):
  """One ResNet stage: its BasicBlocks, named and strided as in models.ResNet."""
  stage: int
  blocks: int
  features: int
  conv_fn: Any = None
  bn_groups: int = 1

  @nn.compact
  def __call__(self, x, train: bool):
    for b in range(self.blocks):
      strides = 2 if (self.stage > 0 and b == 0) else 1
      x = models.BasicBlock(self.features, strides, conv_fn=self.conv_fn, bn_groups=self.bn_groups,
                            name=f"layer{self.stage + 1}_{b}")(x, train)
    return x


def _encoder_layers(config, conv_fn) -> dict:
  """{layer: (module, input shape without rows)} of the encoder."""
  m = config.model
  if m.name == "mnistnet":
    return {"conv1": (ConvPool(20, "conv1", conv_fn), (28, 28, 1)),
            "conv2": (ConvPool(50, "conv2", conv_fn), (12, 12, 20)),
            "fc": (DenseRelu(500), (4, 4, 50))}
  groups = m.get("bn_groups", 1)
  layers, shape = {"stem": (Stem(64, conv_fn, groups), (32, 32, 3))}, (32, 32, 64)
  for s, width in enumerate((64, 128, 256, 512)):
    layers[f"layer{s + 1}"] = (Stage(s, 2, width, conv_fn, groups), shape)
    size = shape[0] // (2 if s > 0 else 1)
    shape = (size, size, width)
  return layers


def layer_fns(config, conv_backward: str) -> dict:
  """{layer: (fn(variables, x, train) -> y, input shape without rows)}: the model's own modules applied one layer
  at a time to the variables of that layer (``layer_variables``); the head (ResNet: with its average pool) last."""
  conv_fn = conv.conv_for_backend(conv_backward)
  fns = {}
  for name, (module, shape) in _encoder_layers(config, conv_fn).items():
    fns[name] = (lambda v, x, train, module=module: module.apply(v, x, train, mutable=["batch_stats"])[0], shape)
  head = models.build_model(config).head
  pooled = config.model.name == "resnet18"

  def head_fn(v, x, train):
    x = jnp.mean(x, axis=(1, 2)) if pooled else x
    return head.apply(v, x, train=train, mutable=["batch_stats"])[0]
  fns["head"] = (head_fn, (4, 4, 512) if pooled else (500,))
  return fns


def _owns(layer: str, name: str) -> bool:
  if layer == "stem":
    return name in ("conv1", "bn1")
  return name.startswith(layer + "_") if layer.startswith("layer") else name == layer


def layer_variables(variables: dict, layer: str) -> dict:
  """The model's variables ({"params": ..., "batch_stats": ...}) that ``layer`` uses, under the names it uses."""
  if layer == "head":
    return {col: tree["head"] for col, tree in variables.items() if "head" in tree}
  return {col: {n: v for n, v in tree["encoder"].items() if _owns(layer, n)} for col, tree in variables.items()
          if "encoder" in tree}


def loss_fn(cfg, labels, is_current):
  """SupCon + weighted IRD of the current embeddings ``z`` against the past ones ``zp`` (the race's Co2L)."""
  def fn(z, zp):
    supcon = losses.supcon_loss(features=z, labels=labels, is_current=is_current, temperature=cfg.temperature,
                                base_temperature=cfg.base_temperature)
    ird = losses.ird_loss(z_cur=z, z_past=zp, temp_cur=cfg.temp_cur, temp_past=cfg.temp_past)
    return supcon + cfg.ird_weight * ird
  return fn


def layer_programs(ctx, carry, plain: bool = False) -> dict:
  """{layer: [(fn, args), ...]}: the jittable calls a layer's share of the race run's step is made of (train:
  forward and backward; past: the past model's forward, in the step's BatchNorm mode), with the step's
  convolution gradients, or ``plain``: lax's convolutions (for counting FLOPs)."""
  conv_backward = "xla" if plain else cpu_kernels.of_model(ctx.config.model).conv_backward
  cfg = ctx.loss_cfg
  batch = ctx.config.train.batch_size
  rows, rng = 2 * batch, np.random.default_rng(0)
  rand = lambda *shape: jnp.asarray(rng.standard_normal(shape, np.float32))  # noqa: E731
  variables = carry.state.variables()
  programs = {}
  for name, (fn, shape) in layer_fns(ctx.config, conv_backward).items():
    v, x = layer_variables(variables, name), rand(rows, *shape)
    g = jnp.ones_like(jax.eval_shape(lambda v, x, fn=fn: fn(v, x, True), v, x))  # its values do not change the work
    first = name in ("conv1", "stem")  # the image gets no gradient

    def train(params, x, g, v=v, fn=fn):
      return jnp.sum(fn({**v, "params": params}, x, True) * g)
    programs[name] = [(jax.grad(train, argnums=0 if first else (0, 1)), (v["params"], x, g)),
                      (lambda v, x, fn=fn: fn(v, x, cfg.past_bn == "batch"), (v, x))]
  labels = jnp.asarray(rng.integers(0, 10, batch))
  dim = ctx.config.model.embedding_dim
  programs["loss"] = [(jax.grad(loss_fn(cfg, labels, labels >= 5)), (rand(rows, dim), rand(rows, dim)))]
  return programs


def bound_ms(costs: dict, peak: float, bw: float) -> float:
  """A compiled program's roofline: each instruction at max(FLOPs / matmul rate, least bytes / stream bandwidth)."""
  return sum(c.bound_ms(peak, bw) for c in costs.values())


def jax_layers(net: str, batch: int, repeats: int, peak: float, bw: float) -> tuple[dict, float]:
  """({layer: {gflop, ms, bound_ms}}, the whole step's ms), timed with the step's kernels and XLA options."""
  race = cpu_race.race_chunk(net, batch, 1)
  ctx, carry = race[:2]
  programs = layer_programs(ctx, carry)
  counted = layer_programs(ctx, carry, plain=True)  # FLOPs of plain convolutions (cpu_race.step_gflop's)
  out = {}
  for name in LAYERS[net]:
    row = {"gflop": 0.0, "ms": 0.0, "bound_ms": 0.0}
    for (fn, args), (plain, _) in zip(programs[name], counted[name]):
      compiled = jax.jit(fn).lower(*args).compile(compiler_options=ctx.compiler_options)
      row["ms"] += roofline.median_seconds(compiled, args, repeats) * 1e3
      row["bound_ms"] += bound_ms(hlo_cost.costs(compiled.as_text()), peak, bw)
      row["gflop"] += roofline.jaxpr_flops(jax.make_jaxpr(plain)(*args)) / 1e9
    out[name] = row
  step_ms = roofline.median_seconds(cpu_race.call_of(*race), (), repeats) * 1e3
  return out, step_ms


def torch_layers(python: str, net: str, batch: int, repeats: int) -> dict:
  """{"ms": {layer: ms}, "layout": {layer: PyTorch's faster layout}} from perf/torch_layer_race.py under ``python``."""
  return cpu_race.torch_json([python, "perf/torch_layer_race.py", f"--net={net}", f"--batch={batch}",
                              f"--repeats={repeats}"])


def summarize(jax_rows: dict, torch_ms: dict, step_ms: float, useful_gflop: float, peak: float) -> dict:
  """Per-layer rows with the faster side, and the step's share of the matmul rate three ways."""
  rows = []
  for name in jax_rows:
    ours, theirs = jax_rows[name]["ms"], torch_ms.get(name)
    best = ours if theirs is None else min(ours, theirs)
    rows.append({"layer": name, "gflop": jax_rows[name]["gflop"], "bound_ms": jax_rows[name]["bound_ms"],
                 "jax_ms": ours, "torch_ms": theirs, "best_ms": best,
                 "faster": "lasp_jax" if theirs is None or ours <= theirs else "torch",
                 "best_of_rate": jax_rows[name]["gflop"] / peak * 1e3 / best})
  ideal_ms = useful_gflop / peak * 1e3
  layers_ms, best_ms = sum(r["jax_ms"] for r in rows), sum(r["best_ms"] for r in rows)
  bounds_ms = sum(r["bound_ms"] for r in rows)
  torch_layers_ms = sum(r["torch_ms"] for r in rows) if all(r["torch_ms"] is not None for r in rows) else None
  return {"rows": rows, "matmul_gflops": peak, "useful_gflop": useful_gflop, "step_ms": step_ms,
          "layers_ms": layers_ms, "torch_layers_ms": torch_layers_ms, "best_ms": best_ms, "bounds_ms": bounds_ms,
          "rest_ms": step_ms - layers_ms, "ms_at_60_percent": ideal_ms / 0.6,
          "share_now": ideal_ms / step_ms, "share_layers": ideal_ms / layers_ms,
          "share_best": ideal_ms / best_ms, "share_bounds": ideal_ms / bounds_ms}


def print_summary(s: dict, net: str, batch: int, bw: float):
  print(f"{net}, batch {batch} (two views): matmul rate {s['matmul_gflops']:.1f} GFLOP/s (after both sides "
        f"{s['matmul_gflops_after']:.1f}), stream {bw:.1f} GB/s")
  print(f"{'layer':<8}{'GFLOP':>8}{'bound ms':>10}{'lasp_jax ms':>13}{'PyTorch ms':>12}{'faster':>10}"
        f"{'its rate':>10}")
  for r in s["rows"]:
    theirs = "-" if r["torch_ms"] is None else f"{r['torch_ms']:.2f}"
    theirs += {"channels_last": " CL"}.get(s.get("torch_layouts", {}).get(r["layer"]), "")
    print(f"{r['layer']:<8}{r['gflop']:>8.3f}{r['bound_ms']:>10.2f}{r['jax_ms']:>13.2f}{theirs:>12}"
          f"{r['faster']:>10}{r['best_of_rate']:>10.0%}")
  theirs = "" if s["torch_layers_ms"] is None else f"; PyTorch's layers alone {s['torch_layers_ms']:.1f} ms"
  print(f"step {s['step_ms']:.1f} ms; its layers alone {s['layers_ms']:.1f} ms (the rest, augmentation, optimizer "
        f"and scheduling, {s['rest_ms']:.1f}){theirs}; every layer at the faster side {s['best_ms']:.1f} ms; "
        f"the step at 60 % of the matmul rate {s['ms_at_60_percent']:.1f} ms")
  print(f"share of the matmul rate ({s['useful_gflop']:.2f} GFLOP a step): now {s['share_now']:.0%}; the layers "
        f"alone {s['share_layers']:.0%}; every layer at the faster side, nothing else {s['share_best']:.0%}; "
        f"every lasp_jax layer at its bound {s['share_bounds']:.0%}")
  print("(bound: each instruction of the layer's compiled programs at max(FLOPs / matmul rate, least bytes / "
        "stream bandwidth); its rate: the layer's needed FLOPs over the faster side's time, as a share of the "
        "matmul rate; CL: PyTorch's faster layout was channels_last, else NCHW)")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  xla_cache.enable()
  f = flags.FLAGS
  net, repeats = f.net, f.repeats
  batch = f.batch or {"mnistnet": 512, "resnet18": 32}[net]
  if f.torch_python and not os.access(f.torch_python, os.X_OK):  # before minutes of measurement
    print(f"perf.layer_race: --torch_python={f.torch_python} is not an executable file", file=sys.stderr)
    return 2
  peak, bw = roofline.matmul_peak_gflops(), roofline.stream_gbps()
  jax_rows, step_ms = jax_layers(net, batch, repeats, peak, bw)
  theirs = torch_layers(f.torch_python, net, batch, repeats) if f.torch_python else {"ms": {}, "layout": {}}
  s = summarize(jax_rows, theirs["ms"], step_ms, cpu_race.step_gflop(net, batch), peak)
  s["torch_layouts"] = theirs["layout"]
  # The VM's rates drift within minutes: the rate again after both sides shows how far it moved meanwhile.
  s["matmul_gflops_after"] = roofline.matmul_peak_gflops()
  print_summary(s, net, batch, bw)
  if f.out:
    write_json_atomic(f.out, {"net": net, "batch": batch, "summary": s, "stream_gbps": bw,
                                   "provenance": provenance.provenance()})


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
