"""Benchmark suite: prints a table and writes JSON (component, shapes, device, median time).

    python -m perf.benchmark [--quick] [--batch=512] [--eb_images=1024] [--out=BENCHMARKS.json]

Components: ResNet-18 train step (SupCon + IRD, two views) in float32 and bfloat16;
the mask search for K in {1, 32, 300} (N = 1,024, D = 128, 50 steps); EB salience of
ResNet-18 next to one forward+backward on the same images; two-view augmentation;
a linear-probe epoch; one small-scale task end to end; and each phase of the published
Split-CIFAR10 SD run (ResNet-18, batch 512, memory 500, CIFAR-shaped random data)
timed once compiled and projected to the full 500 + 4 x 100-epoch schedule with probes.
Nothing here asserts a time. The JSON is rewritten after every section (``complete: false`` until
the last one), so a run that is killed keeps what it measured.
"""

from __future__ import annotations

import functools
import json
import tempfile
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import app, flags, logging

from configs import cifar10, mnist5k
from lasp_jax import config_lib, errors, provenance, train
from lasp_jax.data import augment
from lasp_jax.loop import boundary, epochs, steps
from lasp_jax.loop.checkpoint import write_json_atomic
from lasp_jax.method import losses, mask_search, salience
from lasp_jax.method.pools import training_pool
from lasp_jax.model.conv import conv_for_backend
from lasp_jax.model.models import Model, ProjectionHead, ResNet
from lasp_jax.platform import cpu_kernels
from perf import cpu_race, roofline

FLAGS = flags.FLAGS
flags.DEFINE_bool("quick", False, "Small shapes (CPU smoke run).")
flags.DEFINE_integer("batch", 512, "Samples per train step (two views each).", lower_bound=2)
flags.DEFINE_integer("eb_images", 1024, "Images for the EB benchmark.", lower_bound=1)
flags.DEFINE_integer("repeats", 3, "Timed repetitions (median reported).", lower_bound=1)
flags.DEFINE_string("out", "benchmark_results.json", "JSON output (the measured machines' files: results/benchmarks/).")
# The names --only takes; the last two run only when named ("task" rides with "probe": one section times both).
SECTIONS = ("step", "search", "eb", "probe", "task", "aug", "projection", "cpu_race", "dtype")
flags.DEFINE_string("only", "", f"Comma-separated subset: {','.join(SECTIONS)} (cpu_race and dtype run only when "
                    "named).")
flags.DEFINE_string("torch_python", "", "cpu_race: a python with torch + torchvision.")
flags.DEFINE_enum("projection_dtype", "float32", ["float32", "bfloat16"], "compute_dtype of the projection.")
flags.DEFINE_enum("conv", "auto", list(cpu_kernels.CONV_BACKWARD), "Convolution gradients (lasp_jax/model/conv.py).")


def timed(fn, *args, repeats=3):
  """(compile+first run seconds, median seconds of the next runs)."""
  return roofline.first_and_median_seconds(fn, args, repeats)


def resnet_kernels() -> cpu_kernels.CpuKernels:
  """ResNet-18's kernels as a run resolves them (``--conv`` overrides the gradients)."""
  return cpu_kernels.resolve("resnet18", conv_backward=FLAGS.conv)


def resnet(dtype=jnp.float32):
  conv_fn = conv_for_backend(resnet_kernels().conv_backward)
  return Model(ResNet(dtype=dtype, conv_fn=conv_fn), ProjectionHead(512, 128, True, dtype=dtype))


def bench_step(batch, dtype, repeats):
  """One SupCon + IRD forward/backward + SGD update of ResNet-18 on 2 x batch views."""
  model = resnet(dtype)
  x = jax.random.normal(jax.random.PRNGKey(0), (2 * batch, 32, 32, 3))
  v = model.init(jax.random.PRNGKey(1), x[:2])
  labels = jnp.arange(batch) % 10
  tx = optax.sgd(0.1, momentum=0.9)
  opt = tx.init(v["params"])

  @functools.partial(jax.jit, compiler_options=cpu_kernels.compiler_options(resnet_kernels()))
  def step(params, stats, opt, x):
    def loss_fn(p):
      (_, z), upd = model.apply({"params": p, "batch_stats": stats}, x, train=True, mutable=["batch_stats"])
      _, zp = model.apply({"params": jax.lax.stop_gradient(p), "batch_stats": stats}, x, train=False)
      sc = losses.supcon_loss(features=z, labels=labels, is_current=labels < 5, temperature=0.5)
      return sc + losses.ird_loss(z_cur=z, z_past=zp, temp_cur=0.2, temp_past=0.01), upd
    (loss, upd), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
    u, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, u), upd["batch_stats"], opt, loss

  first, med = timed(step, v["params"], v["batch_stats"], opt, x, repeats=repeats)
  k = resnet_kernels()
  # The kernel choice is a CPU one; on an accelerator XLA's own kernels run (the label said "ynnpack" there).
  kernels = f"convs={k.convs} grads={k.conv_backward}" if jax.default_backend() == "cpu" else "XLA kernels"
  return dict(component=f"train step ResNet-18 {jnp.dtype(dtype).name} {kernels}",
              shape=f"batch {batch} (x2 views) 32x32",
              compile_s=round(first - med, 3), median_s=round(med, 4), throughput=f"{batch / med:.1f} samples/s")


def bench_search(k, repeats, n=1024, d=128, classes=10):
  feats = losses.l2_normalize(jax.random.normal(jax.random.PRNGKey(0), (n, d)))
  labels = jnp.arange(n) % classes
  valid = jnp.ones(n, bool)
  run = lambda key: mask_search.search(key, feats, labels, valid, num_classes=classes, restarts=k).s_final
  first, med = timed(run, jax.random.PRNGKey(1), repeats=repeats)
  return dict(component=f"mask search K={k}", shape=f"N={n} D={d} 50 steps", compile_s=round(first - med, 3),
              median_s=round(med, 4), throughput=f"{k / med:.1f} restarts/s")


def bench_eb(n, repeats):
  model = resnet()
  x = jax.random.normal(jax.random.PRNGKey(0), (n, 32, 32, 3))
  v = model.init(jax.random.PRNGKey(1), x[:2], train=False)
  p = jnp.ones((n, 128)) * 0.5
  options = cpu_kernels.compiler_options(resnet_kernels())  # as a run compiles EB (lookahead.py)
  eb = jax.jit(lambda v, x: salience.excitation_backprop(model, v, x, p)[0], compiler_options=options)
  fb = jax.jit(lambda v, x: jax.grad(lambda prm: jnp.sum(model.apply({**v, "params": prm}, x, train=False)[1] * p))(
      v["params"]), compiler_options=options)
  _, t_eb = timed(eb, v, x, repeats=repeats)
  _, t_fb = timed(fb, v, x, repeats=repeats)
  return [dict(component="EB salience ResNet-18", shape=f"{n} images 32x32", median_s=round(t_eb, 4),
               throughput=f"{t_eb / t_fb:.2f}x one fwd+bwd"),
          dict(component="fwd+bwd ResNet-18 (eval mode)", shape=f"{n} images 32x32", median_s=round(t_fb, 4),
               throughput=f"{n / t_fb:.1f} images/s")]


def bench_augment(batch, repeats):
  """Two SimCLR views (the CIFAR-10 recipe) of a uint8 batch, on the device."""
  cfg = config_lib.augment_config(cifar10.get_config(), rotate=False)
  images = jax.random.randint(jax.random.PRNGKey(0), (batch, 32, 32, 3), 0, 256).astype(jnp.uint8)
  views = jax.jit(lambda k, x: augment.two_views(k, x, jnp.zeros(batch), cfg))
  first, med = timed(views, jax.random.PRNGKey(1), images, repeats=repeats)
  return dict(component="two-view augmentation (CIFAR recipe)", shape=f"{batch} images -> {2 * batch} views 32x32",
              compile_s=round(first - med, 3), median_s=round(med, 4), throughput=f"{batch / med:.0f} images/s")


def _twice(ctx, carry, fn):
  """Wall seconds of two calls of ``fn``: (compile + run, warm run)."""
  def wall():
    t = time.perf_counter()
    fn()
    jax.block_until_ready(carry.state.params)
    return time.perf_counter() - t
  return wall(), wall()


def _task(ctx, carry, t):
  def go():
    carry.rs.progress.epoch, carry.rs.progress.call, carry.rs.progress.partial = 0, 0, []
    epochs.train_task([ctx], [carry], t, epochs.OneRun())
  return go


def bench_probe_and_task(repeats):
  """A probe (cached features) and one whole task of configs/mnist5k.py."""
  del repeats
  config = mnist5k.get_config()
  config.progress = False
  ctx, carry = train.build(config, tempfile.mkdtemp())
  task_s, task_warm = _twice(ctx, carry, _task(ctx, carry, 0))
  probe_s, probe_warm = _twice(ctx, carry, lambda: train.evaluate_task(ctx, carry, 0))
  host = host_overhead(ctx, carry)
  return [dict(component="task 0 of configs/mnist5k.py", shape=f"{config.train.epochs_first} epochs, 800 samples",
               compile_s=round(task_s - task_warm, 2), median_s=round(task_warm, 2),
               throughput=f"{config.train.epochs_first * 800 / task_warm:.0f} samples/s"),
          dict(component="linear probe (cached features)", shape=f"{config.eval.epochs} epochs",
               compile_s=round(probe_s - probe_warm, 2), median_s=round(probe_warm, 3),
               throughput=f"{probe_warm / config.eval.epochs * 1000:.1f} ms/epoch"),
          host]


def projection_config(quick: bool):
  """configs/cifar10.py (SD, memory 500) on random CIFAR-shaped data: the published run's shapes."""
  c = cifar10.get_config()
  c.dataset, c.progress = "synthetic", False
  per_class = (60, 20) if quick else (5000, 1000)  # Split-CIFAR10: 5,000 train / 1,000 test images per class
  c.data.synthetic = ml_collections.ConfigDict(dict(num_classes=10, image_size=32, channels=3,
                                                    train_per_class=per_class[0], test_per_class=per_class[1]))
  c.train.epochs_first = c.train.epochs = 2
  c.train.warmup_epochs = 0
  c.train.batch_size = 32 if quick else c.train.batch_size
  c.compute_dtype = FLAGS.projection_dtype
  if quick:
    c.model.width, c.memory.size, c.eval.epochs, c.lasp.restarts = 0.125, 40, 2, 8
  return c


def bench_projection(quick: bool):
  """Times each phase of a Split-CIFAR10 SD run once compiled and projects the published schedule.

  Published: 500 epochs on task 0, 100 on each of tasks 1-4 (memory 500 joins their pool),
  a boundary (memory update, past snapshot, K=300 mask search) before tasks 1-4, and a
  100-epoch re-augmenting probe after every task.
  """
  paper = cifar10.get_config()
  c = projection_config(quick)
  ctx, carry = train.build(c, tempfile.mkdtemp())
  t0 = _twice(ctx, carry, _task(ctx, carry, 0))
  p0 = _twice(ctx, carry, lambda: train.evaluate_task(ctx, carry, 0))
  bd = _twice(ctx, carry, lambda: boundary.open_segment(ctx, carry, 1))
  t1 = _twice(ctx, carry, _task(ctx, carry, 1))
  p1 = _twice(ctx, carry, lambda: train.evaluate_task(ctx, carry, 1))
  epoch0, epoch1 = t0[1] / c.train.epochs_first, t1[1] / c.train.epochs
  probe = (p0[1] + p1[1]) / 2 * paper.eval.epochs / c.eval.epochs
  total = (paper.train.epochs_first * epoch0 + (paper.data.num_tasks - 1) * (paper.train.epochs * epoch1 + bd[1])
           + paper.data.num_tasks * probe)
  shape = f"batch {c.train.batch_size}, {c.compute_dtype}"
  row = lambda name, first, warm, thr: dict(component=name, shape=shape, compile_s=round(first - warm, 2),
                                            median_s=round(warm, 3), throughput=thr)
  return [row("Split-CIFAR10 SD: task-0 epoch", t0[0] / c.train.epochs_first, epoch0,
              f"{len(ctx.stream.train_indices(0)) / epoch0:.0f} samples/s"),
          row("Split-CIFAR10 SD: later-task epoch", t1[0] / c.train.epochs, epoch1, "task data + memory"),
          row(f"Split-CIFAR10 SD: boundary (K={c.lasp.restarts} search)", bd[0], bd[1], "memory, past model, mask"),
          row(f"Split-CIFAR10 SD: probe ({c.eval.epochs} epochs)", p0[0], p1[1], "re-augmented each epoch"),
          dict(component="PROJECTED published SD run", shape=shape, median_s=round(total, 1),
               throughput=f"{total / 60:.1f} min (500 + 4 x 100 epochs, 4 boundaries, 5 probes)")]


def host_overhead(ctx, carry):
  """The host's share of one compiled chunk call: the call's wall time against the device's time for it."""
  pool = training_pool(ctx.stream, carry.memory, 0)
  b = steps.epoch_batches(pool, ctx.config.train.batch_size, ctx.config.train.steps_per_call,
                          np.random.default_rng(0))
  mask = jnp.ones(ctx.config.model.embedding_dim, bool)
  lr = jnp.full((ctx.config.train.steps_per_call,), 0.01)
  chunk = lambda: steps.Batch(*[jax.device_put(f[0], ctx.batch_sharding) for f in b])
  carry.state, m = ctx.chunk_fn(carry.state, None, mask, carry.data, chunk(), lr)  # the state is donated
  jax.block_until_ready(m)
  t = time.perf_counter()
  carry.state, m = ctx.chunk_fn(carry.state, None, mask, carry.data, chunk(), lr)
  dispatch = time.perf_counter() - t
  jax.block_until_ready(m)
  total = time.perf_counter() - t
  return dict(component="host time per compiled chunk", shape=f"{ctx.config.train.steps_per_call} steps",
              median_s=round(total, 4), throughput=f"host {100 * dispatch / total:.2f}% of the chunk")


def bench_dtypes(repeats):
  """float32 vs bfloat16: the R-MNIST race step (batch 256, past model) under each ``compute_dtype``, then a
  large matmul (does this CPU's matmul have a fast bf16 path, e.g. AMX?). The matmuls run last, a
  precaution against heavy AMX use lowering the clock for the next rows; no such effect was shown here:
  the same float32 step measured 156-217 ms in four runs of one afternoon whatever ran before it."""
  rows = []
  for dt in ("float32", "bfloat16"):
    s = cpu_race.jax_step_seconds("mnistnet", 256, 4, repeats, compute_dtype=dt)
    rows.append(dict(component=f"R-MNIST race step, compute_dtype={dt}", shape="batch 256, past model",
                     median_s=round(s, 4), throughput=f"{256 / s:.0f} samples/s"))
  for dt in (jnp.float32, jnp.bfloat16):
    a = jnp.ones((2048, 2048), dt)
    f = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    _, s = timed(f, a, a, repeats=max(repeats, 5))
    rows.append(dict(component=f"matmul {jnp.dtype(dt).name}", shape="2048^3", median_s=round(s, 4),
                     throughput=f"{2 * 2048 ** 3 / s / 1e9:.0f} GFLOP/s"))
  return rows


def _save(device, rows, race, complete: bool):
  """Writes the JSON atomically: a killed run leaves the sections done so far, marked ``complete: false``, and
  never a half-written file. Provenance (commit, machine, date) rides along."""
  write_json_atomic(FLAGS.out, {"device": device, "git_commit": provenance.provenance()["git_commit"],
                                "provenance": provenance.provenance(), "complete": complete, "rows": rows,
                                "cpu_race": race})


def _print_rows(rows):
  for r in rows:
    print(f"{r['component']:40} {r['shape']:32} {r['median_s']:>10} {r.get('compile_s', ''):>10}  {r['throughput']}",
          flush=True)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  only = set(FLAGS.only.split(",")) if FLAGS.only else set(SECTIONS[:7])
  if only - set(SECTIONS):
    raise app.UsageError(f"unknown --only {','.join(sorted(only - set(SECTIONS)))}; expected some of "
                         f"{','.join(SECTIONS)}")
  if "cpu_race" in only and not FLAGS.torch_python:  # before any section runs
    raise app.UsageError("--only=cpu_race needs --torch_python=PY (a python with torch)", exitcode=2)
  batch = 32 if FLAGS.quick else FLAGS.batch
  eb_n = 64 if FLAGS.quick else FLAGS.eb_images
  race = {}

  def run_race():
    race_rows, summary = cpu_race.race(FLAGS.torch_python, quick=FLAGS.quick)
    race.update(summary)
    return race_rows

  # In this order; dtype last: its bf16 matmuls come after every other row (see bench_dtypes).
  sections = [
      ("step", lambda: [bench_step(batch, jnp.float32, FLAGS.repeats), bench_step(batch, jnp.bfloat16, FLAGS.repeats)]),
      ("search", lambda: [bench_search(k, FLAGS.repeats) for k in (1, 32, 300)]),
      ("eb", lambda: bench_eb(eb_n, FLAGS.repeats)),
      ("aug", lambda: [bench_augment(batch, FLAGS.repeats)]),
      ("probe", lambda: bench_probe_and_task(FLAGS.repeats)),
      ("projection", lambda: bench_projection(FLAGS.quick)),
      ("cpu_race", run_race),
      ("dtype", lambda: bench_dtypes(FLAGS.repeats)),
  ]
  wanted = only | ({"probe"} if "task" in only else set())
  rows = []
  device = f"{jax.devices()[0].device_kind} x{jax.device_count()}, host {provenance.cpu_model()}"
  _save(device, rows, None, complete=False)
  print(f"device: {device}")
  print(f"{'component':40} {'shape':32} {'median s':>10} {'compile s':>10}  throughput", flush=True)
  for name, bench in sections:
    if name in wanted:
      new = bench()
      _print_rows(new)
      rows += new
      _save(device, rows, race or None, complete=False)
  _save(device, rows, race or None, complete=True)
  if race:
    print(json.dumps(race))  # last line: the race's ratios, machine-readable


if __name__ == "__main__":
  errors.run_app(main)
