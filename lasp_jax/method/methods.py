"""Continual-learning methods: each one object that says what it trains on and what it does at a boundary.

A method's rules are all here, as behaviour the loop calls without asking which method it runs: its training
pool (``pool``), its distillation term of the loss (``distillation``, inside the compiled step) and its weight,
what it does when a segment opens (``at_boundary``: snapshot the past model; the look-ahead methods also run the
look-ahead and take from it, ``take_lookahead``: SD the subset of embedding dims it distils, GM the salience that
slows weights). Training, SupCon and the probe are shared. Adding a method is one class and one line in
``METHODS``.

No jax here: the config check (config_lib) reads these before the library loads.
"""

from __future__ import annotations

from typing import ClassVar


class Method:
  """Co2L: asymmetric SupCon on the current task and the replay memory, IRD against the past model."""
  replay: ClassVar[bool] = True       # the memory joins the training pool (else it only feeds the probe)
  distills: ClassVar[bool] = True     # IRD against the past model
  cumulative: ClassVar[bool] = False  # trains on every earlier task's data: needs given boundaries
  ird_weight: ClassVar[float] = 1.0   # the published --distill_power
  selective: ClassVar[bool] = False   # SD: IRD on the look-ahead's subset of embedding dims
  modulates: ClassVar[bool] = False   # GM: gradients scaled by the look-ahead's EB salience
  # The look-ahead data of the published commands (preset=published), per scenario; else onlycurrent.
  published_srs_data: ClassVar[dict] = {}

  @property
  def looks_ahead(self) -> bool:
    """Whether a boundary runs the look-ahead (mask search, and EB for GM): the LookAhead methods."""
    return isinstance(self, LookAhead)

  def distillation(self, *, z_cur, z_past, dim_mask, temp_cur, temp_past, valid):
    """The loss's distillation term (traced inside the train step): IRD on every embedding dim."""
    del dim_mask
    from lasp_jax.method import losses  # noqa: PLC0415  (losses imports jax; see pool)
    return losses.ird_loss(z_cur=z_cur, z_past=z_past, temp_cur=temp_cur, temp_past=temp_past, valid=valid)

  def at_boundary(self, rs, state, past, look, *, task: int):
    """What the method does when a segment opens, after the memory update (loop/boundary.py): returns the train
    state and past model the next segment trains with, and the look-ahead's result (None: it ran none).
    ``look()`` runs the look-ahead on the model as it ended the segment before. Co2L: the past model it
    distils against next is that model (a method that does not distil keeps none)."""
    del rs, look, task
    from lasp_jax.loop.steps import past_model  # noqa: PLC0415  (steps imports jax; see pool)
    return state, past_model(state) if self.distills else past, None

  def take_lookahead(self, rs, state, res, *, task: int):
    """What the boundary's look-ahead result ``res`` (lookahead.BoundaryResult) changes: the run state ``rs``
    and the train state it returns. Co2L takes nothing."""
    del rs, res, task
    return state

  def pool(self, stream, memory, t: int, slot=None):
    """Task t's training pool and the samples of one epoch: the task's data and the memory (replay), or the
    task's data alone."""
    from lasp_jax.method import pools  # noqa: PLC0415  (pools imports jax; this module is read before jax loads)
    if self.replay:
      pool = pools.training_pool(stream, memory, t, slot)
      return pool, len(pool.index)
    own = pools.task_pool(stream, t, slot)
    return own, len(own.index)


class LookAhead(Method):
  """A method that looks ahead at every boundary: Co2L's past model, then the look-ahead, then what it takes."""

  def at_boundary(self, rs, state, past, look, *, task: int):
    state, past, _ = super().at_boundary(rs, state, past, look, task=task)
    res = look()
    return self.take_lookahead(rs, state, res, task=task), past, res


class SD(LookAhead):
  """LASP's selective distillation: IRD on the salient subset of embedding dims, weight 5."""
  selective = True
  ird_weight = 5.0
  published_srs_data = {"domain": "onlypast"}  # the published R-MNIST SD command's --onlypast

  def distillation(self, *, z_cur, z_past, dim_mask, temp_cur, temp_past, valid):
    from lasp_jax.method import losses  # noqa: PLC0415  (see Method.distillation)
    return losses.selective_ird_loss(z_cur=z_cur, z_past=z_past, dim_mask=dim_mask, temp_cur=temp_cur,
                                     temp_past=temp_past, valid=valid)

  def take_lookahead(self, rs, state, res, *, task: int):
    """The searched subset becomes the mask the step distils (all dims when it kept <= 1: full IRD)."""
    rs.mask = res.mask.tolist()
    if res.info["sd_fallback_to_full_ird"]:
      import sys  # noqa: PLC0415

      import tqdm  # noqa: PLC0415
      tqdm.tqdm.write(f"task {task}: salient subset has {res.info['selected_dims']} dim(s); SD falls back to "
                      f"full IRD", file=sys.stderr)
    return super().take_lookahead(rs, state, res, task=task)


class GM(LookAhead):
  """LASP's gradient modulation: full IRD; weight gradients times 1 - min(1, gamma) from EB salience."""
  modulates = True

  def take_lookahead(self, rs, state, res, *, task: int):
    """The EB salience goes into the optimizer state, where the modulation reads it."""
    from lasp_jax.method import modulation  # noqa: PLC0415  (modulation imports jax)
    state = super().take_lookahead(rs, state, res, task=task)
    return state.replace(opt_state=modulation.set_salience(state.opt_state, res.gamma))


class SDGM(SD, GM):
  """Both of LASP's parts (SD's distillation and weight, GM's modulation)."""
  published_srs_data = {}  # no published command: the look-ahead on the current data


class Finetune(Method):
  """Lower bound: SupCon on each task alone, no replay, no distillation (the memory feeds only the probe)."""
  replay = False
  distills = False
  ird_weight = 0.0


class Joint(Finetune):
  """Upper bound: every task so far at once, an epoch drawing as many samples as a replay method's."""
  cumulative = True

  def pool(self, stream, memory, t: int, slot=None):
    from lasp_jax.method import pools  # noqa: PLC0415  (see Method.pool)
    own = pools.task_pool(stream, t, slot)
    pool = pools.concat_pools(*[pools.task_pool(stream, j) for j in range(t + 1)])
    return pool, min(len(pool.index), len(own.index) + len(memory))


METHODS: dict[str, Method] = {"co2l": Method(), "sd": SD(), "gm": GM(), "sd_gm": SDGM(), "finetune": Finetune(),
                              "joint": Joint()}
BASELINES = ("finetune", "joint")
