"""Run health: checks that flag a task that did not really train.

A non-finite loss is not a flag: the run stops at once with a ``TrainingError`` naming the step (train.py), and
an experiment records the cell as failed (experiments/runner.py).

Each check is a pure function of a task's per-epoch curves (or its boundary
record) that returns a :class:`Flag` or ``None``. A run prints every flag as one
line when it is raised and stores them all in ``results.json["health"]``; tables
mark a flagged run with a dagger and never average it in silently.

A method's degenerate reference values (``Method.reference_values``; the contrastive family's in
method/references.py) sit beside its curves; the checks compare the two.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Optional, Sequence

import numpy as np

# A value within this fraction of its degenerate reference counts as sitting on it. The healthy runs of the
# repository's configs end their tasks 5-15 % below SupCon's constant-embedding value and 10-20 % below
# IRD's uniform value; a collapsed finetune run sits within 0.1 % of it.
NEAR = 0.01
# Relative embedding variance (total variance / mean squared norm, 1 for spread-out unit vectors, 0 for one
# point) under which the embedding counts as collapsed.
MIN_Z_VAR = 0.02
# A task's last epoch must end at or below this fraction of its first epoch's loss.
FALL = 0.99


@dataclasses.dataclass(frozen=True)
class Flag:
  """One failed check: which, where, and what was measured."""
  check: str
  task: int
  epoch: Optional[int]
  message: str

  def line(self) -> str:
    where = f"task {self.task}" + ("" if self.epoch is None else f", epoch {self.epoch}")
    return f"health: {where}: {self.check}: {self.message}"


def _near(value: float, reference: float) -> bool:
  return math.isfinite(value) and math.isfinite(reference) and abs(value - reference) <= NEAR * abs(reference)


def _settled_at(value: float, reference: float, first: Optional[float]) -> bool:
  """``value`` sits on ``reference`` and the task did not bring it down there from above (``first``: the task's
  first epoch's value).

  A task that starts above a degenerate value and falls onto it is training: its new classes begin on top of the
  replayed ones (every positive farther than the negatives, a loss worse than a constant embedding's) and
  separate as the loss falls, passing the reference on the way (the offline default's SD run: SupCon 31.82 ->
  27.81 against 27.57 in task 1, whose classes the probe then separates at 99 %). A collapse sits on the value
  or rises to it.
  """
  return _near(value, reference) and (first is None or not math.isfinite(first)
                                      or first <= value + NEAR * abs(reference))


# ------------------------------------------------------------------------------ per-epoch checks

def supcon_at_constant(*, task: int, epoch: int, supcon: float, constant: float,
                       first: Optional[float] = None) -> Optional[Flag]:
  """SupCon settled at the value of a constant embedding (every logit equal): the embedding stopped separating."""
  if constant > 0 and _settled_at(supcon, constant, first):
    return Flag("supcon_constant", task, epoch,
                f"SupCon {supcon:.4g} sits at the value of a constant embedding ({constant:.4g}) and did not fall "
                f"to it: the current task's classes are not separated")
  return None


def ird_at_uniform(*, task: int, epoch: int, ird: float, uniform: float,
                   first: Optional[float] = None) -> Optional[Flag]:
  """IRD settled at the uniform-relation value: the current relations are flat (the embeddings collapsed).

  Above it the relations are sharp but unlike the past model's (Co2L's raw dot products on Split-MNIST), which
  is no collapse: the tables report accuracy, not this."""
  if _settled_at(ird, uniform, first):
    return Flag("ird_uniform", task, epoch,
                f"IRD {ird:.4g} sits at the uniform-relation value {uniform:.4g} and did not fall to it: the "
                f"current relations are flat")
  return None


def embedding_collapsed(*, task: int, epoch: int, z_var: float) -> Optional[Flag]:
  """Near-zero spread of the embeddings within a batch (relative to their squared norm)."""
  if math.isfinite(z_var) and z_var < MIN_Z_VAR:
    return Flag("embedding_variance", task, epoch,
                f"embedding variance {z_var:.3g} of its squared norm (under {MIN_Z_VAR:g}): the embeddings "
                f"of a batch coincide")
  return None


# ------------------------------------------------------------------------------ per-task checks

def lr_frozen(*, task: int, lrs: Sequence[float], floor: float) -> Optional[Flag]:
  """The task's whole schedule sits at the floor learning rate (a 1-epoch task under the per-epoch cosine)."""
  if len(lrs) and bool(np.all(np.asarray(lrs) <= floor * (1 + 1e-4))):
    return Flag("lr_frozen", task, None,
                f"trains entirely at the floor learning rate {floor:g} (train.schedule=published_epoch_cosine "
                f"with a 1-epoch task); use train.schedule=step_cosine or more epochs")
  return None


def loss_not_falling(*, task: int, epoch_losses: Sequence[float]) -> Optional[Flag]:
  """A task of >= 2 epochs whose last epoch's loss is above ``FALL`` x its first epoch's."""
  if len(epoch_losses) >= 2 and not epoch_losses[-1] <= FALL * epoch_losses[0]:
    return Flag("loss_not_falling", task, len(epoch_losses),
                f"training loss {epoch_losses[-1]:.4g} in its last epoch vs {epoch_losses[0]:.4g} in its first "
                f"(must fall below {FALL:g}x): check train.lr and the schedule")
  return None


def grad_vanished(*, task: int, grad_norms: Sequence[float], ratio: float = 1e-3) -> Optional[Flag]:
  """The task's last epoch has a gradient norm under ``ratio`` x the largest of the run so far.

  A representation collapsed to one embedding is a stationary point of SupCon and IRD (all relations equal):
  the gradient is exactly 0 and nothing trains again, while the loss only looks flat.
  """
  norms = np.asarray(grad_norms, np.float64)
  norms = norms[np.isfinite(norms)]
  if len(norms) >= 2 and norms[-1] < ratio * norms.max():
    return Flag("grad_vanished", task, None,
                f"gradient norm {norms[-1]:.2g} in its last epoch, up to {norms.max():.3g} before: the "
                f"representation stopped training")
  return None


def diverging(*, task: int, z_norms: Sequence[float], ratio: float = 20.0) -> Optional[Flag]:
  """The mean embedding norm grew over ``ratio`` x the run's first epoch's (unnormalized embeddings only:
  SupCon's logits z.z'/tau reward scale and nothing bounds it at too high a learning rate)."""
  norms = np.asarray(z_norms, np.float64)
  norms = norms[np.isfinite(norms)]
  if len(norms) >= 2 and norms[-1] > ratio * norms[0]:
    return Flag("diverging", task, None,
                f"embedding norm {norms[-1]:.3g} ({norms[0]:.3g} in the run's first epoch): lower train.lr or "
                f"set model.normalize_embedding=True")
  return None


def mask_degenerate(*, task: int, selected_dims: int) -> Optional[Flag]:
  """The mask search kept <= 1 dimension: selective distillation falls back to full IRD."""
  if selected_dims <= 1:
    return Flag("mask_degenerate", task, None,
                f"the mask search kept {selected_dims} dimension(s): SD falls back to full IRD for this task")
  return None


# ------------------------------------------------------------------------------ a task, a run

def epoch_flags(task: int, row: dict, first: Optional[dict] = None) -> list[Flag]:
  """The per-epoch checks on one curve row (a dict of the epoch's mean metrics and references); ``first``: the
  task's first epoch's row (a value the task brought down onto its reference is not flagged)."""
  e = row.get("epoch")
  start = lambda k: None if first is None else first.get(k)
  found = []
  if "supcon_const" in row:
    found.append(supcon_at_constant(task=task, epoch=e, supcon=row["supcon"], constant=row["supcon_const"],
                                    first=start("supcon")))
  if row.get("ird", 0.0) > 0 and "ird_uniform" in row:
    found.append(ird_at_uniform(task=task, epoch=e, ird=row["ird"], uniform=row["ird_uniform"], first=start("ird")))
  if "z_var" in row:
    found.append(embedding_collapsed(task=task, epoch=e, z_var=row["z_var"]))
  return [f for f in found if f]


# The method's traits task_flags reads (the loop passes the method's, recheck the registry's for a finished run).
METHOD_TRAITS = ("selective", "cumulative", "norm_diverges")


def task_flags(task: int, curves: Sequence[dict], *, lrs=None, floor: float = 0.0,
               boundaries: Sequence[dict] = (), selective: bool = False, cumulative: bool = False,
               norm_diverges: bool = True) -> list[Flag]:
  """Every check on task ``task``: its last epoch, its loss over the task, the run's norms so far, its boundaries.

  ``curves``: the run's curve rows so far (task ``task``'s last); ``lrs``: the task's per-step learning rates;
  ``boundaries``: the boundary records made during the task (one with given boundaries, any number detected).
  ``cumulative``: the method trains on every task so far (joint). Its later tasks' pools are mostly data it has
  fit already, drawn anew each epoch: the new task's share of the fall (1/(t+1) of it) is below the noise of an
  epoch's mean (joint at d600: its task 13 of 20 ends 0.7 % above where it began while its loss over the run falls
  from 9.5 to 4.6), so whether its loss falls is asked of task 0 only; the other checks hold for every task.
  ``norm_diverges``: the method's loss rewards embedding scale (the contrastive family): its norm's growth is asked.
  """
  own = [c for c in curves if c["task"] == task]
  found = epoch_flags(task, own[-1], own[0]) if own else []
  if not cumulative or task == 0:
    found.append(loss_not_falling(task=task, epoch_losses=[c["loss"] for c in own]))
  found.append(grad_vanished(task=task, grad_norms=[c.get("grad_norm", math.nan) for c in curves]))
  if norm_diverges:
    found.append(diverging(task=task, z_norms=[c.get("z_norm", math.nan) for c in curves]))
  if lrs is not None:
    found.append(lr_frozen(task=task, lrs=lrs, floor=floor))
  if selective:
    found += [mask_degenerate(task=task, selected_dims=int(b["selected_dims"])) for b in boundaries
              if "selected_dims" in b]
  return [f for f in found if f]


def recheck(results: dict) -> list[Flag]:
  """The flags today's checks raise on a finished run's results.json (its curves, learning rates and boundary
  records): how a shipped run's flags read under the current checks."""
  curves, flags = results.get("curves", []), []
  from lasp_jax.method import registry  # noqa: PLC0415  (lazily: the registry imports no jax, and a check of a results file needs no method loaded)
  name = results.get("method")
  traits = registry.traits(name) if name in registry.METHODS else registry.DEFAULT_TRAITS
  for t in sorted({c["task"] for c in curves}):
    upto = [c for c in curves if c["task"] <= t]
    flags += task_flags(t, upto,  # lr_frozen needs the config's floor: not rechecked
                        boundaries=[b for b in results.get("boundaries", []) if b.get("task") == t],
                        **{k: traits[k] for k in METHOD_TRAITS})
  return flags


def record(flags: Iterable[Flag]) -> dict:
  """The ``health`` entry of results.json."""
  flags = [dataclasses.asdict(f) for f in flags]
  return {"ok": not flags, "checks": sorted({f["check"] for f in flags}), "flags": flags}


def is_flagged(results: dict) -> bool:
  """Whether a results dict carries a failed health check (results without a record count as unchecked, not
  flagged)."""
  return not results.get("health", {}).get("ok", True)


def flagged_checks(results: dict) -> list[str]:
  """The checks a results dict failed, as its ``health`` record names them (for a seeds' mean,
  seeds.mean_result has already written them "check (seeds j, k)")."""
  h = results.get("health", {})
  return list(h.get("checks", []))


def mark(results: dict) -> str:
  """The mark a table puts after a flagged run's figures."""
  return "†" if is_flagged(results) else ""
