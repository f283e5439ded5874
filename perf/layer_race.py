"""Layer race: each layer of the R-MNIST race step alone, in lasp_jax and in PyTorch (oneDNN), on this machine.

    python -m perf.layer_race --torch_python=PY [--batch=512] [--out=FILE.json]

The step (perf/cpu_race.py, batch B, two views: 2B rows) splits into five layers: conv1 (5x5 1->20, ReLU, 2x2
pool), conv2 (5x5 20->50, ReLU, pool), fc (800->500, ReLU), the head (500-500-500) and the loss (SupCon + IRD).
A layer's share of the step is its forward and backward on the current model (the input gradient too, except for
conv1, whose input is the image) plus its forward on the past model (no gradient); the loss has no past part.
Each layer runs alone, compiled with the step's XLA options and kernels, on random inputs of its shapes; the same
layers run in PyTorch under ``PY`` (``perf/torch_layer_race.py``, after lasp_jax's timing, so neither shares the
cores with the other). Printed per layer: its FLOPs, its roofline bound (each instruction of lasp_jax's compiled
programs at max(FLOPs / matmul rate, least bytes / stream bandwidth), both measured in the same run), each side's
time, the faster one and the rate it reaches; then the step's share of the matmul rate as it runs, as its layers
add up alone, with every layer at the faster of the two, and with every lasp_jax layer at its bound. The third is
what this machine's kernels allow these layer shapes: if it is below a target, no choice between these two
libraries' kernels meets it. One run, one machine: figures to compare, not to assert.
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from flax import linen as nn

from lasp_jax import conv, cpu_kernels, losses, models, provenance, steps, xla_cache
from lasp_jax.checkpoint import write_json_atomic
from perf import cpu_race, hlo_cost, roofline

LAYERS = ("conv1", "conv2", "fc", "head", "loss")

_TORCH = flags.DEFINE_string("torch_python", "", "A python with torch (the PyTorch side); empty: lasp_jax only.")
_BATCH = flags.DEFINE_integer("batch", 512, "Images per step (two views each).")
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per layer; the median counts.")
_OUT = flags.DEFINE_string("out", "", "JSON output (optional).")


def layer_fns(config, conv_backward: str) -> dict:
  """{layer: (fn(params, x) -> y, path of its params in the model's, input shape without rows)}: the model's own
  modules applied one at a time, in the train step's form (``models.relu_pool`` with ``train=True``)."""
  conv_fn = conv.conv_for_backend(conv_backward)
  head = models.build_model(config).head

  def conv_block(p, x):
    conv_layer = nn.Conv(p["bias"].shape[0], (5, 5), padding=((0, 0), (0, 0)), conv_general_dilated=conv_fn)
    return models.relu_pool(conv_layer.apply({"params": p}, x), train=True)

  def fc(p, x):
    return jax.nn.relu(nn.Dense(p["bias"].shape[0]).apply({"params": p}, x.reshape(x.shape[0], -1)))

  def head_fn(p, x):
    return head.apply({"params": p}, x, train=True, mutable=["batch_stats"])[0]

  return {"conv1": (conv_block, ("encoder", "conv1"), (28, 28, 1)),
          "conv2": (conv_block, ("encoder", "conv2"), (12, 12, 20)),
          "fc": (fc, ("encoder", "fc"), (4, 4, 50)),
          "head": (head_fn, ("head",), (500,))}


def loss_fn(cfg: steps.LossConfig, labels, is_current):
  """SupCon + weighted IRD of the current embeddings ``z`` against the past ones ``zp`` (the race's Co2L)."""
  def fn(z, zp):
    supcon = losses.supcon_loss(features=z, labels=labels, is_current=is_current, temperature=cfg.temperature,
                                base_temperature=cfg.base_temperature)
    ird = losses.ird_loss(z_cur=z, z_past=zp, temp_cur=cfg.temp_cur, temp_past=cfg.temp_past)
    return supcon + cfg.ird_weight * ird
  return fn


def _params_at(params, path):
  for key in path:
    params = params[key]
  return params


def layer_programs(batch: int, plain: bool = False):
  """(the race's run, {layer: [(fn, args), ...]}): the jittable calls a layer's share of the step is made of
  (train, past), with the step's convolution gradients, or ``plain``: lax's convolutions (for counting FLOPs)."""
  run, *_ = cpu_race.race_chunk("mnistnet", batch, 1)
  conv_backward = "xla" if plain else cpu_kernels.of_model(run.config.model).conv_backward
  rows, rng = 2 * batch, np.random.default_rng(0)
  rand = lambda *shape: jnp.asarray(rng.standard_normal(shape, np.float32))  # noqa: E731
  programs = {}
  for name, (fn, path, shape) in layer_fns(run.config, conv_backward).items():
    p, x = _params_at(run.state.params, path), rand(rows, *shape)
    g = jnp.ones_like(jax.eval_shape(fn, p, x))  # the output's cotangent (its values do not change the work)
    first = name == "conv1"  # the image gets no gradient
    train = jax.grad(lambda p, x, g, fn=fn: jnp.sum(fn(p, x) * g), argnums=0 if first else (0, 1))
    programs[name] = [(train, (p, x, g)), (fn, (p, x))]
  labels = jnp.asarray(rng.integers(0, 10, batch))
  cfg = steps.loss_config(run.config, run.stream)
  programs["loss"] = [(jax.grad(loss_fn(cfg, labels, labels >= 5)), (rand(rows, 500), rand(rows, 500)))]
  return run, programs


def bound_ms(costs: dict, peak: float, bw: float) -> float:
  """A compiled program's roofline: each instruction at max(FLOPs / matmul rate, least bytes / stream bandwidth)."""
  return sum(max(c.flops / peak, c.bytes / bw) for c in costs.values()) / 1e6


def jax_layers(batch: int, repeats: int, peak: float, bw: float) -> tuple[dict, float]:
  """({layer: {gflop, ms, bound_ms}}, the whole step's ms), timed with the step's kernels and XLA options."""
  run, programs = layer_programs(batch)
  _, counted = layer_programs(batch, plain=True)  # FLOPs of plain convolutions (cpu_race.step_gflop's count)
  out = {}
  for name in LAYERS:
    row = {"gflop": 0.0, "ms": 0.0, "bound_ms": 0.0}
    for (fn, args), (plain, _) in zip(programs[name], counted[name]):
      compiled = jax.jit(fn).lower(*args).compile(compiler_options=run.compiler_options)
      row["ms"] += roofline.median_seconds(compiled, args, repeats) * 1e3
      row["bound_ms"] += bound_ms(hlo_cost.costs(compiled.as_text()), peak, bw)
      row["gflop"] += roofline.jaxpr_flops(jax.make_jaxpr(plain)(*args)) / 1e9
    out[name] = row
  step_ms = roofline.median_seconds(cpu_race.chunk_call("mnistnet", batch, 1), (), repeats) * 1e3
  return out, step_ms


def torch_layers(python: str, batch: int, repeats: int) -> dict:
  cmd = [python, "perf/torch_layer_race.py", f"--batch={batch}", f"--repeats={repeats}"]
  out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if out.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip().splitlines()[-1:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(jax_rows: dict, torch_ms: dict, step_ms: float, useful_gflop: float, peak: float) -> dict:
  """Per-layer rows with the faster side, and the step's share of the matmul rate three ways."""
  rows = []
  for name in LAYERS:
    ours, theirs = jax_rows[name]["ms"], torch_ms.get(name)
    best = ours if theirs is None else min(ours, theirs)
    rows.append({"layer": name, "gflop": jax_rows[name]["gflop"], "bound_ms": jax_rows[name]["bound_ms"],
                 "jax_ms": ours, "torch_ms": theirs, "best_ms": best,
                 "faster": "lasp_jax" if theirs is None or ours <= theirs else "torch",
                 "best_of_rate": jax_rows[name]["gflop"] / peak * 1e3 / best})
  ideal_ms = useful_gflop / peak * 1e3
  layers_ms, best_ms = sum(r["jax_ms"] for r in rows), sum(r["best_ms"] for r in rows)
  bounds_ms = sum(r["bound_ms"] for r in rows)
  return {"rows": rows, "matmul_gflops": peak, "useful_gflop": useful_gflop, "step_ms": step_ms,
          "layers_ms": layers_ms, "best_ms": best_ms, "bounds_ms": bounds_ms, "rest_ms": step_ms - layers_ms,
          "share_now": ideal_ms / step_ms, "share_layers": ideal_ms / layers_ms,
          "share_best": ideal_ms / best_ms, "share_bounds": ideal_ms / bounds_ms}


def print_summary(s: dict, batch: int, bw: float):
  print(f"mnistnet, batch {batch} (two views): matmul rate {s['matmul_gflops']:.1f} GFLOP/s, stream {bw:.1f} GB/s")
  print(f"{'layer':<8}{'GFLOP':>8}{'bound ms':>10}{'lasp_jax ms':>13}{'PyTorch ms':>12}{'faster':>10}"
        f"{'its rate':>10}")
  for r in s["rows"]:
    theirs = "-" if r["torch_ms"] is None else f"{r['torch_ms']:.2f}"
    print(f"{r['layer']:<8}{r['gflop']:>8.3f}{r['bound_ms']:>10.2f}{r['jax_ms']:>13.2f}{theirs:>12}"
          f"{r['faster']:>10}{r['best_of_rate']:>10.0%}")
  print(f"step {s['step_ms']:.1f} ms; its layers alone {s['layers_ms']:.1f} ms (the rest, augmentation, optimizer "
        f"and scheduling, {s['rest_ms']:.1f}); every layer at the faster side {s['best_ms']:.1f} ms")
  print(f"share of the matmul rate ({s['useful_gflop']:.2f} GFLOP a step): now {s['share_now']:.0%}; the layers "
        f"alone {s['share_layers']:.0%}; every layer at the faster side, nothing else {s['share_best']:.0%}; "
        f"every lasp_jax layer at its bound {s['share_bounds']:.0%}")
  print("(bound: each instruction of the layer's compiled programs at max(FLOPs / matmul rate, least bytes / "
        "stream bandwidth); its rate: the layer's needed FLOPs over the faster side's time, as a share of the "
        "matmul rate)")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  xla_cache.enable()
  batch, repeats = _BATCH.value, _REPEATS.value
  peak, bw = roofline.matmul_peak_gflops(), roofline.stream_gbps()
  jax_rows, step_ms = jax_layers(batch, repeats, peak, bw)
  torch_ms = torch_layers(_TORCH.value, batch, repeats) if _TORCH.value else {}
  s = summarize(jax_rows, torch_ms, step_ms, cpu_race.step_gflop("mnistnet", batch), peak)
  print_summary(s, batch, bw)
  if _OUT.value:
    write_json_atomic(_OUT.value, {"summary": s, "stream_gbps": bw, "provenance": provenance.provenance()})


if __name__ == "__main__":
  sys.exit(app.run(main))
