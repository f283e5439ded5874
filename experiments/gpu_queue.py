"""Paper-scale R-MNIST on a GPU within a time budget: runs the next missing cells of results/rmnist_paper/ that fit.

    python -m experiments.gpu_queue --out=results/rmnist_paper --budget_s=540   # as many cells as fit in 540 s
    python -m experiments.gpu_queue --table_only                               # table.md from the finished cells
    python -m experiments.gpu_queue --land=DIR1 --land=DIR2     # what GPU calls returned (perf/gpu_queue.sh)
                                                               # (their caches go to .gpu_autotune/: carry it)

Cells, in this order (``queue()``): SD and Co2L on the centred head (``model.head_center=True``) seeds 0-2, the cells
that decide results/equal_heads' verdict at the paper's scale; SD and Co2L seeds 1-4 at memory 200 (seed 0 of both
exists); SD and Co2L on the centred head at the lambda results/threats chose for each on its validation split,
seeds 0-2 (once that grid is whole); GM and SD+GM seeds 0-4; then the four methods at memory 500. Every cell is
``lasp_jax.main`` on configs/rmnist.py (SD searches on
``onlypast``, the published R-MNIST command, as seed 0 did) with the probe after the last task only, in its own
process. A cell starts only if the budget left covers its expected time (the slowest finished run of its method,
or of any method, x 1.25, its compile time left out once the cache in --scratch holds the cell's programs; 180 s
before any run): on an H200 a cold cell takes 4.7 (Co2L) to 6.5 (SD) minutes, about 60 % of it compiling, so
cold SD and Co2L cells one after another do not fit in one 10-minute call. ``--parallel=N`` runs N cells at once
on the one device (their compiles would overlap on the host's cores), each with 1/N of its memory
(``XLA_PYTHON_CLIENT_MEM_FRACTION``); every batch's wall time goes to ``queue_log.json``, so one seed's time and
N seeds' time are measured under the same code. On the lent H200 of 2026-12-04 the second process of a batch of 2
found no CUDA device (the GPU admitted one process): a cell that cannot open the device sends the rest of the call
to one cell at a time.

A finished cell leaves ``<out>/<cell>/{results.json,config.json,log.txt}``; a non-finite loss leaves
``FAILED.json`` (the error; not retried); an interrupted cell leaves nothing (the next call reruns it). The
raw-pixel baseline of each (seed, memory) runs on the host CPU while the device trains (``JAX_PLATFORMS=cpu``),
is kept in ``raw_pixels.json`` and written into each results.json's ``baselines``. ``table.md`` is rewritten after
every batch: mean (std) over seeds of both metrics, the paper beside, health flags, SD − Co2L paired by seed with
its 95 % interval, the switches that differ from the published mode.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Optional

from absl import flags

from experiments import aggregate, runner
from lasp_jax import config_lib, errors
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS
REPO = pathlib.Path(__file__).resolve().parents[1]


def define_flags() -> None:
  """The command line (defined when run as a script only)."""
  flags.DEFINE_string("out", "results/rmnist_paper", "Where finished cells are read from and written to.")
  flags.DEFINE_integer("budget_s", 540, "Seconds this call may take; no cell starts that would not fit.", lower_bound=0)
  flags.DEFINE_integer("parallel", 1, "Cells run at once on the device (1/N of its memory each).", lower_bound=1)
  flags.DEFINE_integer("max_cells", 0, "Stop after this many cells (0: as many as the budget allows).", lower_bound=0)
  flags.DEFINE_float("margin", 1.25, "A batch starts when the time left covers its measured parts x this.",
                     lower_bound=1.0)
  flags.DEFINE_string("config", "configs/rmnist.py", "The run configuration (a tiny one for a CPU dry run).")
  flags.DEFINE_multi_string("set", [], "More overrides, key=value (--set=data.num_tasks=2), for every cell.")
  flags.DEFINE_bool("raw_pixels", True, "Fit each (seed, memory)'s raw-pixel baseline on the host meanwhile.")
  flags.DEFINE_bool("table_only", False, "Rewrite table.md from the finished cells and stop.")
  flags.DEFINE_string("scratch", "", "Work folder for checkpoints (default: a temporary folder).")
  flags.DEFINE_multi_string("land", [], "What GPU calls returned (rmnist_paper.tgz, or its folder with log.txt): "
                            "new cells, queue_log entries, raw-pixel fits and the call's log go into --out, then "
                            "table.md is rewritten; nothing runs.")


@dataclasses.dataclass(frozen=True)
class Cell:
  method: str
  seed: int
  memory: int = 200
  head: str = "published"            # or "centred" (model.head_center=True, results/equal_heads' second head)
  ird_weight: Optional[float] = None  # the distillation weight when not the config's (a tuned lambda)

  @property
  def name(self) -> str:
    parts = [self.method, *([f"m{self.memory}"] if self.memory != 200 else []),
             *(["centred"] if self.head == "centred" else []),
             *([f"lambda{self.ird_weight:g}"] if self.ird_weight is not None else []), f"seed{self.seed}"]
    return "_".join(parts)

  @property
  def pixels_key(self) -> str:
    """Raw pixels depend on the seed (angles, memory draws) and the memory size only."""
    return f"seed{self.seed}_m{self.memory}"

  @property
  def group(self) -> tuple:
    """The table row the cell belongs to."""
    return self.memory, self.head, self.ird_weight, self.method

  def overrides(self) -> list[str]:
    srs = ["lasp.srs_data=onlypast"] if self.method == "sd" else []
    head = ["model.head_center=True"] if self.head == "centred" else []
    lam = [f"train.ird_weight={self.ird_weight:g}"] if self.ird_weight is not None else []
    return [f"method={self.method}", f"seed={self.seed}", f"memory.size={self.memory}", *srs, *head, *lam]


# The cells that decide the equal-heads verdict first: the paper-scale pair on the centred head, then the
# published head's seeds beside the stored seed 0; the tuned lambda pair (tuned_cells) follows them.
CENTRED = tuple(Cell(m, s, head="centred") for s in range(3) for m in ("sd", "co2l"))
CELLS = (CENTRED + tuple(Cell(m, s) for s in range(1, 5) for m in ("sd", "co2l"))
         + tuple(Cell(m, s) for m in ("gm", "sd_gm") for s in range(5))
         + tuple(Cell(m, s, 500) for m in ("sd", "co2l", "gm", "sd_gm") for s in range(5)))
SEEN = (Cell("sd", 0), Cell("co2l", 0))  # run before the queue existed; tabulated with the rest
THREATS = REPO / "results" / "threats" / "runs.json"


def tuned_cells(path: pathlib.Path = THREATS) -> tuple:
  """SD and Co2L on the centred head at the lambda results/threats chose for each on its validation split."""
  chosen = _read(path).get("chosen", {}) if path.exists() else {}
  names = {"SD": "sd", "Co2L": "co2l"}
  return tuple(Cell(names[m], s, head="centred", ird_weight=float(c["lambda"]))
               for s in range(3) for m, c in chosen.items() if m in names)


def queue() -> tuple:
  """Every cell in run order: the centred pair and the published head's seeds, the tuned pair, the rest."""
  fixed = len(CENTRED) + 8
  return CELLS[:fixed] + tuned_cells() + CELLS[fixed:]


# Switches every cell sets: the probe once, after the last task (Table 1 reports it); no host-side raw-pixel fit
# inside the run (the queue fits it meanwhile); 59 steps per device call (one R-MNIST task epoch is 118 steps).
RUN_SWITCHES = ("eval.every_task=False", "eval.raw_pixels=False", "train.steps_per_call=59")
LABELS = {"sd": "SD (onlypast)", "co2l": "Co2L", "gm": "GM", "sd_gm": "SD+GM"}


def state(out: pathlib.Path, cell: Cell) -> str:
  """'done', 'failed' or 'missing'."""
  res = runner.outcome(out / cell.name)
  return "missing" if res is None else "failed" if runner.failed(res) else "done"


def _parts(out: pathlib.Path, cell: Cell, warm: frozenset) -> tuple[float, float]:
  """(compile, the rest) of a cell's expected time: the largest ``timing.compile_s`` and the largest wall time
  without it over the finished runs of its method (of any method if none; (0, 180) before any run); compile 0
  when the cell's group is in ``warm`` (a cell of the same method, head, memory and lambda ran with this
  --scratch: its programs are in the compilation cache there)."""
  runs = {}
  for c in SEEN + queue():
    if state(out, c) == "done":
      res = json.loads((out / c.name / "results.json").read_text())
      compile_s = res.get("timing", {}).get("compile_s", 0.0)
      runs.setdefault(c.method, []).append((compile_s, res["wall_time_s"] - compile_s))
  mine = runs.get(cell.method) or [r for rs in runs.values() for r in rs]
  if not mine:
    return 0.0, 180.0
  return (0.0 if cell.group in warm else max(r[0] for r in mine)), max(r[1] for r in mine)


def expected_s(out: pathlib.Path, cell: Cell, warm: frozenset = frozenset(), margin: float = 1.25) -> float:
  """A cell's expected time: its compile and the rest (``_parts``) x ``margin``."""
  return margin * sum(_parts(out, cell, warm))


def command(module: str, cell: Cell, extra: list[str], workdir: str | None = None) -> list[str]:
  cmd = [sys.executable, "-m", module, f"--config={FLAGS.config}"]
  if workdir:
    cmd += [f"--workdir={workdir}", f"--compile_cache={pathlib.Path(workdir).parent / 'xla_cache'}"]
  return cmd + [f"--config.{kv}" for kv in (*cell.overrides(), *extra)]


def raw_pixels(out: pathlib.Path, cells, extra) -> dict:
  """Starts the host-side fits of the (seed, memory) pairs ``raw_pixels.json`` lacks: {key: process}."""
  known = _read(out / "raw_pixels.json")
  procs = {}
  for c in cells:
    if c.pixels_key not in known and c.pixels_key not in procs:
      env = {**os.environ, "JAX_PLATFORMS": "cpu"}
      procs[c.pixels_key] = subprocess.Popen(command("experiments.raw_pixels", c, extra), cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  return procs


def collect_raw_pixels(out: pathlib.Path, procs: dict, wait_s: float) -> None:
  """Stores the fits that end within ``wait_s`` and writes them into every finished cell's results.json."""
  known = _read(out / "raw_pixels.json")
  deadline = time.time() + wait_s
  for key, p in procs.items():
    try:
      stdout, _ = p.communicate(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
      p.kill()
      continue
    lines = stdout.strip().splitlines()
    if p.returncode == 0 and lines:  # a fit that printed nothing has no figure to keep
      known[key] = json.loads(lines[-1])["raw_pixels"]
  write_json_atomic(out / "raw_pixels.json", known)
  for c in SEEN + queue():
    path = out / c.name / "results.json"
    if state(out, c) == "done" and c.pixels_key in known:
      res = json.loads(path.read_text())
      if res.get("baselines", {}).get("raw_pixels") != known[c.pixels_key]:
        res.setdefault("baselines", {})["raw_pixels"] = known[c.pixels_key]
        res["baselines_note"] = "raw_pixels: experiments.raw_pixels for the same config and seed, on the host CPU"
        write_json_atomic(path, res)


def run_batch(out: pathlib.Path, scratch: pathlib.Path, cells, extra, limit_s: float) -> list[str]:
  """Runs ``cells`` at once, each in its own process with 1/len(cells) of the device's memory; returns the
  names of the cells that finished or failed (an overrun or a crash leaves its cell missing)."""
  env = {**os.environ, "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{0.9 / len(cells):.3f}", "PYTHONUNBUFFERED": "1"}
  procs = []
  for c in cells:
    wd = scratch / c.name
    log = open(scratch / f"{c.name}.log", "w")  # pylint: disable=consider-using-with
    procs.append((c, wd, log, subprocess.Popen(command("lasp_jax.main", c, [*RUN_SWITCHES, *extra], str(wd)),
                                               cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)))
  ended, deadline = [], time.time() + limit_s
  for c, wd, log, p in procs:
    try:
      rc = p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
      p.kill()
      rc = "timeout"
    log.close()
    text = (scratch / f"{c.name}.log").read_text()
    print(f"{c.name}: rc={rc}", flush=True)
    dest = out / c.name
    if rc == 0 and (wd / "results.json").exists():
      dest.mkdir(parents=True, exist_ok=True)
      for name in ("config.json", "results.json"):
        shutil.copy(wd / name, dest / name)
      (dest / "log.txt").write_text(text)
      ended.append(c.name)
    elif rc == 2 and "non-finite" in text:
      errors = [line for line in text.splitlines() if line.startswith("error:")]
      runner.mark_failed(dest, errors[-1] if errors else "non-finite loss", c.seed)
      (dest / "log.txt").write_text(text)
      ended.append(c.name)
    else:
      print(text[-2000:], file=sys.stderr)
  return ended


def _no_device(scratch: pathlib.Path, cell) -> bool:
  """Whether ``cell``'s process failed to open the accelerator (another process of its batch held it)."""
  log = scratch / f"{cell.name}.log"
  return log.exists() and "Unable to initialize backend" in log.read_text()


def advance(out: pathlib.Path, scratch: pathlib.Path, budget_s: float, parallel: int, max_cells: int,
            extra: list[str], with_raw_pixels: bool, margin: float = 1.25) -> None:
  """Runs batches of the next missing cells while the budget covers them; logs each batch's wall time."""
  # warm: the groups whose programs the compilation cache in ``scratch`` holds (this call's or an earlier one's
  # on the same machine: a --scratch that outlives the call keeps both).
  t0, done, warm = time.time(), 0, {tuple(g) for g in _read(scratch / "warm_groups.json", [])}
  pixels = raw_pixels(out, [c for c in queue() if state(out, c) == "missing"][:max(parallel, 4)],
                      extra) if with_raw_pixels else {}
  while True:
    missing = [c for c in queue() if state(out, c) == "missing"]
    todo = missing[:parallel]
    if max_cells:
      todo = todo[:max_cells - done]
    left = budget_s - (time.time() - t0) - 20  # 20 s to copy and tabulate
    need = _batch_estimate(out, todo, frozenset(warm), margin)
    if not todo or need > left:
      print(f"queue: {done} cells run; " + (
          f"next {[c.name for c in todo]} needs ~{need:.0f} s, {left:.0f} s left" if todo else
          f"--max_cells={max_cells} reached, {len(missing)} cells missing" if missing else "every cell is done"),
          flush=True)
      break
    start = time.time()
    ended = run_batch(out, scratch, todo, extra, left)
    warm |= {c.group for c in todo if c.name in ended}
    write_json_atomic(scratch / "warm_groups.json", sorted(warm, key=str))
    log = _read(out / "queue_log.json", [])
    log.append({"cells": [c.name for c in todo], "ended": ended, "parallel": len(todo),
                "wall_s": round(time.time() - start, 1), "device": _device()})
    write_json_atomic(out / "queue_log.json", log)
    done += len(ended)  # a cell that found no device runs again below
    write_table(out)
    if len(todo) > 1 and any(_no_device(scratch, c) for c in todo if c.name not in ended):
      # The device admits one process at a time (an exclusive compute mode): the rest go one by one.
      print(f"queue: a cell of {len(todo)} found no device; --parallel=1 from here", flush=True)
      parallel = 1
    elif len(ended) < len(todo):
      break  # an overrun or a crash: stop and leave the log to read
  collect_raw_pixels(out, pixels, max(0.0, budget_s - (time.time() - t0) - 5))
  write_table(out)


def _batch_estimate(out: pathlib.Path, todo, warm: frozenset = frozenset(), margin: float = 1.25) -> float:
  """A batch's expected time. Measured batches of its size: one cell's expected time x their ratio to a single
  run, or, with no single run measured, ``margin`` x the slowest of them. Else the cells' processes compile at
  once on the host's cores and take turns on the device: the largest compile plus every cell's rest, x
  ``margin`` (one cell's expected time for a batch of one)."""
  if not todo:
    return 0.0
  log = [b for b in _read(out / "queue_log.json", []) if b["ended"] == b["cells"]]
  singles = [b["wall_s"] for b in log if b["parallel"] == 1]
  batches = [b["wall_s"] for b in log if b["parallel"] == len(todo)]
  if len(todo) > 1 and batches:
    one = max(expected_s(out, c, warm, margin) for c in todo)
    return one * max(batches) / max(singles) if singles else margin * max(batches)
  parts = [_parts(out, c, warm) for c in todo]
  return margin * (max(p[0] for p in parts) + sum(p[1] for p in parts))


def ended_cells(out: pathlib.Path) -> dict:
  """{cell: its results or failure marker} of every cell in ``out`` that ended (one read per cell)."""
  return {c: res for c in SEEN + queue() if (res := runner.outcome(out / c.name)) is not None}


def finished_cells(out: pathlib.Path, ended: Optional[dict] = None) -> dict:
  """{cell: its results} of every cell in ``out`` that finished (not failed); ``ended``: ended_cells(out), if read."""
  return {c: res for c, res in (ended_cells(out) if ended is None else ended).items() if not runner.failed(res)}


def write_table(out: pathlib.Path) -> None:
  """table.md: per memory and method, mean (std) over the finished seeds of both metrics, the paper beside."""
  rows, differ = [], set()
  pixels = _read(out / "raw_pixels.json")
  every = SEEN + queue()
  ended = ended_cells(out)
  finished = finished_cells(out, ended)
  for group in sorted(dict.fromkeys(c.group for c in every), key=lambda g: (g[0], g[1] != "published",
                                                                            g[2] or 0, list(LABELS).index(g[3]))):
    memory, head, lam, method = group
    cells = [c for c in every if c.group == group]
    done = [c for c in cells if c in finished]
    res = [finished[c] for c in done]
    failed = [c.name for c in cells if c in ended and c not in finished]
    if not res and not failed:
      continue
    for c in done:
      cfg = json.loads((out / c.name / "config.json").read_text())
      differ |= {k for k, v in config_lib.PUBLISHED_PRESET.items() if cfg.get(k) != json.loads(json.dumps(v))}
    flags_ = sorted({f"{r['seed']}: {', '.join(r['health']['checks'])}" for r in res
                     if r.get("health", {}).get("checks")})
    unchecked = sum("health" not in r for r in res)
    paper = aggregate.PAPER_TABLE1[(memory, method)]["rmnist/domain_il"] if head == "published" and lam is None \
        else None
    label = LABELS[method] + ("" if head == "published" else ", centred head") + (
        "" if lam is None else f", lambda {lam:g}")
    rows.append([memory, label, f"{len(res)}" + (f" (+{len(failed)} failed)" if failed else ""),
                 aggregate.cell(aggregate.mean_std(r["final"]["domain_il"] for r in res)),
                 aggregate.cell(aggregate.mean_std(r["acc_matrix"]["domain_il"][-1][-1] for r in res), paper),
                 aggregate.cell(aggregate.mean_std(_raw_pixels(c, r, pixels) for c, r in zip(done, res))),
                 "; ".join(flags_) or ("ok" if not unchecked else f"not recorded in {unchecked}"),
                 aggregate.cell(aggregate.mean_std(r["wall_time_s"] for r in res))])
  header = ["memory", "method", "seeds", "per-angle Domain-IL", "last-angle (A[T][T]) [paper, Table 1]",
            "raw pixels (per-angle)", "health flags (seed: checks)", "wall s"]
  text = ["# Paper-scale Rotated MNIST: mean (std) over seeds", "",
          "Produced by `python -m experiments.gpu_queue` (see its docstring); the published code reports the "
          "last-angle metric, the paper 'accuracy on all seen classes'.",
          "", aggregate.markdown_table(header, rows), "", *_differences(finished),
          "Switches that differ from the published mode (`--config.preset=published` sets them): "
          + (", ".join(f"`{k}`" for k in sorted(differ)) or "none") + ".", ""]
  write_text_atomic(out / "table.md", "\n".join(text))


def sd_co2l_pairs(finished: dict) -> dict:
  """{(memory, head, lambda): {seed: (SD's results, Co2L's results)}} over the seeds both finished, from
  ``finished`` ({cell: results})."""
  done = {(*c.group[:3], c.method, c.seed): res for c, res in finished.items()}
  out = {}
  for group in dict.fromkeys(k[:3] for k in done):
    pairs = {k[4]: (r, done[(*group, "co2l", k[4])]) for k, r in sorted(done.items())
             if k[:4] == (*group, "sd") and (*group, "co2l", k[4]) in done}
    if pairs:
      out[group] = pairs
  return out


def _differences(finished: dict) -> list[str]:
  """SD − Co2L over the seeds both finished ({cell: results}), per memory, head and lambda: the mean with its 95 %
  interval (t, n − 1 dof) for both metrics, and each seed's per-angle difference; no lines when no seed has both."""
  rows = []
  for group, pairs in sd_co2l_pairs(finished).items():
    m1 = {s: sd["final"]["domain_il"] - co2l["final"]["domain_il"] for s, (sd, co2l) in pairs.items()}
    last = lambda r: r["acc_matrix"]["domain_il"][-1][-1]
    m2 = [last(sd) - last(co2l) for sd, co2l in pairs.values()]
    memory, head, lam = group
    rows.append([memory, head + ("" if lam is None else f", lambda {lam:g}"), len(pairs),
                 *aggregate.interval_cell(list(m1.values()))[1:], *aggregate.interval_cell(m2)[1:],
                 ", ".join(f"{s}: {d:+.2f}" for s, d in m1.items())])
  if not rows:
    return []
  header = ["memory", "head", "seeds", "per-angle SD − Co2L [95 % interval]", "verdict",
            "last-angle SD − Co2L [95 % interval]", "verdict", "per-angle, seed: difference"]
  return ["## Paired differences, SD − Co2L (the seeds both finished)", "", aggregate.markdown_table(header, rows), ""]


def _raw_pixels(cell: Cell, res: dict, pixels: dict):
  """The cell's fit from raw_pixels.json, else what the run's results.json holds."""
  fit = pixels.get(cell.pixels_key) or res.get("baselines", {}).get("raw_pixels", {})
  return fit.get("domain_il")


def _device() -> str:
  try:
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout.strip() or "cpu"
  except (OSError, subprocess.SubprocessError):
    return "cpu"


def _read(path: pathlib.Path, default=None):
  return json.loads(path.read_text()) if path.exists() else ({} if default is None else default)


def land(out: pathlib.Path, archive: pathlib.Path) -> list[str]:
  """Merges one GPU call's returned folder (``archive``: perf/gpu_queue.sh's rmnist_paper.tgz, or the folder that
  holds it and the call's log.txt) into ``out``: the cells it finished or failed that ``out`` lacks, its queue_log
  entries that ``out`` lacks (in its order), its raw-pixel fits of seeds ``out`` has none for, the call's log as
  the next ``logs/callN.txt`` unless one holds it already. Cells ``out`` has are kept: two calls that started from
  the same committed folder each return every older cell. Returns the cells landed."""
  call_log = archive / "log.txt" if archive.is_dir() else None
  archive = archive / "rmnist_paper.tgz" if archive.is_dir() else archive
  with tempfile.TemporaryDirectory() as tmp:
    try:
      with tarfile.open(archive) as tar:  # the "data" filter (no links out, no absolute paths) where Python has it
        tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except (OSError, tarfile.TarError) as e:
      raise errors.DataError(f"cannot unpack --land {archive}: {errors.one_line(e)}") from None
    src = pathlib.Path(tmp) / "rmnist_paper"
    if not src.is_dir():
      raise errors.DataError(f"--land {archive} holds no rmnist_paper/ folder")
    landed = [c.name for c in sorted(src.iterdir()) if c.is_dir() and not (out / c.name).exists()
              and runner.outcome(c) is not None]
    for name in landed:
      shutil.copytree(src / name, out / name)
    log = _read(out / "queue_log.json", [])
    log += [b for b in _read(src / "queue_log.json", []) if b not in log]
    write_json_atomic(out / "queue_log.json", log)
    write_json_atomic(out / "raw_pixels.json", {**_read(src / "raw_pixels.json"), **_read(out / "raw_pixels.json")})
  if call_log is not None and call_log.is_file():
    logs = out / "logs"
    kept = list(logs.glob("call*.txt"))
    if call_log.read_bytes() not in {k.read_bytes() for k in kept}:
      numbers = [int(k.stem[4:]) for k in kept if k.stem[4:].isdigit()]
      logs.mkdir(exist_ok=True)
      shutil.copy(call_log, logs / f"call{max(numbers, default=0) + 1}.txt")
  return landed


CACHES = ("xla_cache.tgz", "autotune.tgz")  # what perf/gpu_queue.sh returns for the next machine to start with


def keep_caches(returned: pathlib.Path, dest: pathlib.Path = REPO / ".gpu_autotune") -> list[str]:
  """Copies a GPU call's returned compilation cache and autotuning results (``CACHES``, in the folder
  ``returned``) to ``dest``, where perf/gpu_queue.sh looks for them (carry that folder in the next call)."""
  kept = [n for n in CACHES if (returned / n).is_file()]  # none when ``returned`` is an archive, not a folder
  if kept:
    dest.mkdir(exist_ok=True)
  for n in kept:
    shutil.copy(returned / n, dest / n)
  return kept


def main(argv):
  del argv
  out = pathlib.Path(FLAGS.out)
  bad = [s for s in FLAGS.set if "=" not in s]
  problems = ([f"--out {out} is not a folder"] if not out.is_dir() else []) + (
      [f"--set {bad[0]}: expected key=value"] if bad else []) + (
      [f"--config {FLAGS.config} does not exist"] if not (REPO / FLAGS.config).is_file() else [])
  if problems:
    raise errors.ConfigError(problems[0])
  for archive in FLAGS.land:
    print(f"{archive}: landed {land(out, pathlib.Path(archive)) or 'no new cell'}")
    if kept := keep_caches(pathlib.Path(archive)):
      print(f"{archive}: {', '.join(kept)} -> .gpu_autotune/ (carry it in the next call)")
  if not (FLAGS.table_only or FLAGS.land):
    with tempfile.TemporaryDirectory() as tmp:
      scratch = pathlib.Path(FLAGS.scratch or tmp)
      scratch.mkdir(parents=True, exist_ok=True)
      advance(out, scratch, FLAGS.budget_s, FLAGS.parallel, FLAGS.max_cells, FLAGS.set, FLAGS.raw_pixels,
              FLAGS.margin)
  write_table(out)
  print(f"table: {out / 'table.md'}")


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
