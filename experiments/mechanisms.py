"""Why SD collapses on the published head and why the centred head lifts Co2L: the measurements.

    python -m experiments.mechanisms [--point=d600] [--seed=0] [--out=results/equal_heads/mechanisms]

(a) The first later task. For each head and each of SD (onlycurrent, onlypast), Co2L and Co2L at SD's weight
(lambda 5), tasks 0 and 1 of the equal-heads point (experiments/equal_heads.py) are trained; on the first batch
of task 1, once after its boundary (memory, past model, mask search) and once after its 20 epochs, the script
measures the head's output before centring (its batch mean's norm, the *offset*, against the spread of the rows
around it), SupCon and IRD beside their degenerate values, and the gradient norm of each loss term as the train
step weighs it (SupCon, lambda x IRD on the searched subset or on every dim), and the subset's size.

(b) The whole run of Co2L on both heads with a probe after every task: the accuracy matrix (forgetting per
domain), and at every task's end the offset and spread of the head's output on that task's first batch.

Writes ``mechanisms.json`` (every figure) and ``mechanisms.md`` (the tables) into ``--out``.
"""

from __future__ import annotations

import json
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags, logging

from experiments import aggregate, studies
from lasp_jax import config_lib, errors, provenance, train
from lasp_jax.data import augment
from lasp_jax.loop import epochs, steps
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic
from lasp_jax.method import contrastive, references
from lasp_jax.platform import xla_cache

FLAGS = flags.FLAGS
FIRST_LATER = ("SD onlycurrent", "SD onlypast", "Co2L", "Co2L lambda5", "SD all dims")


def define_flags() -> None:
  flags.DEFINE_string("point", "d600", "An equal_heads Rotated MNIST point.")
  flags.DEFINE_integer("seed", 0, "Seed of every run.", lower_bound=0)
  flags.DEFINE_string("out", "results/equal_heads/mechanisms", "Output folder.")
  flags.DEFINE_list("parts", ["a", "b"], "a: the first later task; b: Co2L's whole run with every probe.")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")


def head_output(ctx, carry, views):
  """The head's output before centring and normalization (train-mode encoder), (2B, D)."""
  p = carry.state.params["head"]
  (feats, _), _ = ctx.model.apply(carry.state.variables(), views, train=True, mutable=["batch_stats"])
  h = jax.nn.relu(feats @ p["fc1"]["kernel"] + p["fc1"]["bias"])
  return np.asarray(h @ p["fc2"]["kernel"] + p["fc2"]["bias"], np.float64)


def first_batch(ctx, carry, t: int):
  """Task t's first training batch as the run's next epoch would draw it, its two views and labels."""
  plan = epochs.epoch_plan(ctx, carry, t)
  b = steps.epoch_batches(plan.pool, ctx.config.train.batch_size, 1, np.random.default_rng(plan.shuffle),
                          take=plan.per_epoch)
  batch = jax.tree.map(lambda f: jax.numpy.asarray(f[0, 0]), b)
  key = jax.random.fold_in(carry.state.rng, 0)
  views = augment.two_views(key, carry.data.images[batch.index], carry.data.angles[batch.domain], ctx.aug_cfg)
  labels = contrastive.contrastive_labels(carry.data.labels[batch.index], carry.data.tags[batch.domain],
                                        ctx.loss_cfg)
  return batch, views, labels


def measure(ctx, carry, t: int) -> dict:
  """Offset and spread of the head's output, the loss terms beside their degenerate values, each term's gradient
  norm as the step weighs it, on task t's first batch (the past model and mask as the run holds them)."""
  batch, views, labels = first_batch(ctx, carry, t)
  valid = np.concatenate([np.asarray(batch.valid)] * 2)
  h = head_output(ctx, carry, views)[valid]
  mean = h.mean(0)
  spread = float(np.sqrt(np.mean(np.sum((h - mean) ** 2, axis=1))))
  mask = jnp.asarray(carry.rs.mask, bool)

  def term(k):
    def f(params):
      return ctx.method.objective(params, carry.state, carry.past, mask, views, labels, batch, ctx.model,
                                  ctx.loss_cfg)[1][k]
    return f
  offset = float(np.linalg.norm(mean))
  out = {"offset": offset, "spread": spread, "offset_over_spread": offset / spread,
         "selected_dims": int(np.sum(carry.rs.mask))}
  sup, g_sup = jax.value_and_grad(term(0))(carry.state.params)
  n = int(np.sum(np.asarray(batch.valid)))
  cur = int(np.sum(np.asarray(batch.valid) & np.asarray(batch.is_current)))
  tc = ctx.config.train
  out.update(supcon=float(sup), supcon_const=references.supcon_constant_value(
      num_valid=[n], num_current=[cur], temperature=tc.temperature, base_temperature=tc.base_temperature),
      grad_supcon=float(optax.tree.norm(g_sup)))
  if carry.past is not None:
    ird, g_ird = jax.value_and_grad(term(1))(carry.state.params)
    w = ctx.loss_cfg.ird_weight
    out.update(ird=float(ird), ird_uniform=references.ird_uniform_value(num_valid=[n]), ird_weight=w,
               grad_weighted_ird=w * float(optax.tree.norm(g_ird)))
    (_, z), _ = ctx.model.apply(carry.state.variables(), views, train=True, mask=jnp.asarray(valid),
                                mutable=["batch_stats"])
    zv = np.asarray(z, np.float64)[valid]
    out["z_var"] = float(np.sum(zv.var(0)) / np.mean(np.sum(zv ** 2, 1)))
  return out


def first_later_task(point, seed: int) -> list[dict]:
  by_label = {v.label: v for v in studies.VARIANTS}
  rows = []
  for head in studies.HEADS:
    for label in FIRST_LATER:
      config = studies.equal_heads_config(point, by_label[label], head, seed)
      with tempfile.TemporaryDirectory() as wd:
        ctx, carry = train.start(config, wd)
        train.run_task(ctx, carry, 0)
        epochs.before_epoch(ctx, carry, 1)  # the boundary: memory, past model, mask search
        start = measure(ctx, carry, 1)
        try:
          train.run_task(ctx, carry, 1)
          end, diverged = measure(ctx, carry, 1), None
        except errors.NonFiniteLoss as e:  # a diverged task 1 is a finding: its row says where
          end, diverged = None, e.what
        curves = [c for c in carry.rs.curves if c["task"] == 1]
        flags_ = sorted({f["check"] for f in carry.rs.health if f["task"] == 1})
      curve = [{k: c[k] for k in ("epoch", "supcon", "ird", "z_var", "grad_norm")} for c in curves]
      rows.append({"head": head, "method": label, "seed": seed, "start": start, "end": end, "task1_flags": flags_,
                   "task1_curve": curve, "diverged": diverged})
      after = diverged or f"{end['offset_over_spread']:.2f}"
      print(f"{head} {label}: offset/spread {start['offset_over_spread']:.2f} -> {after}, flags {flags_}", flush=True)
  return rows


def co2l_whole_run(point, seed: int) -> list[dict]:
  """Co2L on both heads, a probe after every task; offset and spread at every task's end."""
  co2l = next(v for v in studies.VARIANTS if v.label == "Co2L")
  rows = []
  for head in studies.HEADS:
    config = studies.equal_heads_config(point, co2l, head, seed)
    config = config_lib.resolved(config_lib.override(config.copy_and_resolve_references(),
                                                     **{"eval.every_task": True, "eval.raw_pixels": False}))
    ends = []

    def at_end(ctx, carry, t, ends=ends):
      m = measure(ctx, carry, t)
      ends.append({"task": t, **{k: m[k] for k in ("offset", "spread", "offset_over_spread") if k in m},
                   **({"z_var": m["z_var"]} if "z_var" in m else {})})
      return {}
    with tempfile.TemporaryDirectory() as wd:
      res = train.train_and_evaluate(config, wd, on_task_end=at_end)
    acc = np.array([[np.nan if v is None else v for v in row] for row in res["acc_matrix"]["domain_il"]])
    diag = np.diag(acc)
    rows.append({"head": head, "seed": seed, "final": res["final"]["domain_il"], "diagonal": diag.tolist(),
                 "last_row": acc[-1].tolist(), "forgetting": res["forgetting"]["domain_il"],
                 "forgetting_per_domain": (np.nanmax(acc[:-1], axis=0)[:-1] - acc[-1, :-1]).tolist(),
                 "task_ends": ends, "health": res["health"]["checks"]})
    print(f"Co2L {head}: final {res['final']['domain_il']:.2f}, forgetting {res['forgetting']['domain_il']:.2f}",
          flush=True)
  return rows


def tables(data: dict) -> str:
  lines = [f"# Mechanisms ({data['point']}, seed {data['seed']})", "",
           "Produced by `python -m experiments.mechanisms` (its docstring says what is measured).", ""]
  if data.get("first_later_task"):
    rows = []
    for r in data["first_later_task"]:
      for when in ("start", "end"):
        m = r[when]
        if m is None:
          rows.append([r["head"], r["method"], f"task 1 {when}", r["diverged"]] + [""] * 9)
          continue
        rows.append([r["head"], r["method"], f"task 1 {when}", f"{m['offset']:.1f}", f"{m['spread']:.1f}",
                     f"{m['offset_over_spread']:.2f}", f"{m['supcon']:.2f} / {m['supcon_const']:.2f}",
                     f"{m.get('ird', float('nan')):.3f} / {m.get('ird_uniform', float('nan')):.3f}",
                     f"{m['grad_supcon']:.3g}", f"{m.get('grad_weighted_ird', float('nan')):.3g}",
                     m["selected_dims"], f"{m.get('z_var', float('nan')):.3g}",
                     ", ".join(r["task1_flags"]) if when == "end" else ""])
    lines += ["## (a) The first later task (task 1), on its first batch", "",
              aggregate.markdown_table(["head", "method", "when", "offset", "spread", "offset / spread",
                                        "SupCon / constant", "IRD / uniform", "‖∇ SupCon‖", "‖∇ λ·IRD‖",
                                        "dims distilled", "embedding variance", "task-1 flags"], rows), ""]
  if data.get("co2l_whole_run"):
    rows = []
    for r in data["co2l_whole_run"]:
      diag, last = np.array(r["diagonal"]), np.array(r["last_row"])
      rows.append([r["head"], f"{r['final']:.2f}", f"{np.nanmean(diag):.2f}", f"{r['forgetting']:.2f}",
                   f"{np.mean(last[:5]):.2f} / {np.mean(last[5:15]):.2f} / {np.mean(last[15:]):.2f}",
                   " ".join(f"{e['offset_over_spread']:.1f}" for e in r["task_ends"][::4]),
                   " ".join(f"{e.get('z_var', float('nan')):.2f}" for e in r["task_ends"][1::4]),
                   ", ".join(r["health"]) or "ok"])
    lines += ["## (b) Co2L's whole run, a probe after every task", "",
              aggregate.markdown_table(["head", "final per-angle", "mean A[j][j] (just learned)", "forgetting",
                                        "final on domains 0-4 / 5-14 / 15-19", "offset / spread at tasks 0, 4, 8, …",
                                        "embedding variance at tasks 1, 5, 9, …", "health"], rows), ""]
  return "\n".join(lines)


def main(argv):
  del argv
  points = {p.name: p for p in studies.EQUAL_HEADS_POINTS if p.scenario == "domain"}
  if FLAGS.point not in points:
    raise errors.ConfigError(f"unknown --point {FLAGS.point}; expected one of {', '.join(points)}")
  bad = sorted(set(FLAGS.parts) - {"a", "b"})
  if bad:
    raise errors.ConfigError(f"unknown --parts {', '.join(bad)}; expected some of a, b")
  logging.set_verbosity(logging.ERROR)
  xla_cache.enable(FLAGS.compile_cache)
  out = pathlib.Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  path = out / "mechanisms.json"
  data = json.loads(path.read_text()) if path.exists() else {}
  data.update(point=FLAGS.point, seed=FLAGS.seed)
  point = points[FLAGS.point]
  if "a" in FLAGS.parts:
    data["first_later_task"] = first_later_task(point, FLAGS.seed)
    data["provenance_a"] = provenance.provenance()
    write_json_atomic(path, data)
  if "b" in FLAGS.parts:
    data["co2l_whole_run"] = co2l_whole_run(point, FLAGS.seed)
    data["provenance_b"] = provenance.provenance()
    write_json_atomic(path, data)
  write_text_atomic(out / "mechanisms.md", tables(data))
  print(f"tables: {out / 'mechanisms.md'}")


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
