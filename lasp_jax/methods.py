"""Continual-learning methods: each one object that says what it trains on and what it does at a boundary.

A method's rules are all here: its training pool (``pool``), whether it distils the past model and with what
weight, and whether it looks ahead at a boundary and what it takes from the look-ahead (SD the subset of
embedding dims it distils, GM the salience that slows weights). Training, the loss and the probe are shared.
Adding a method is one class and one line in ``METHODS``.

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

  @property
  def looks_ahead(self) -> bool:
    """Whether a boundary runs the look-ahead (mask search, and EB for GM)."""
    return self.selective or self.modulates

  def pool(self, stream, memory, t: int, slot=None):
    """Task t's training pool and the samples of one epoch: the task's data and the memory (replay), or the
    task's data alone."""
    from lasp_jax import pools  # noqa: PLC0415  (pools imports jax; this module is read before jax loads)
    if self.replay:
      pool = pools.training_pool(stream, memory, t, slot)
      return pool, len(pool.index)
    own = pools.task_pool(stream, t, slot)
    return own, len(own.index)


class SD(Method):
  """LASP's selective distillation: IRD on the salient subset of embedding dims, weight 5."""
  selective = True
  ird_weight = 5.0


class GM(Method):
  """LASP's gradient modulation: full IRD; weight gradients times 1 - min(1, gamma) from EB salience."""
  modulates = True


class SDGM(SD):
  """Both of LASP's parts."""
  modulates = True


class Finetune(Method):
  """Lower bound: SupCon on each task alone, no replay, no distillation (the memory feeds only the probe)."""
  replay = False
  distills = False
  ird_weight = 0.0


class Joint(Finetune):
  """Upper bound: every task so far at once, an epoch drawing as many samples as a replay method's."""
  cumulative = True

  def pool(self, stream, memory, t: int, slot=None):
    from lasp_jax import pools  # noqa: PLC0415  (see Method.pool)
    own = pools.task_pool(stream, t, slot)
    pool = pools.concat_pools(*[pools.task_pool(stream, j) for j in range(t + 1)])
    return pool, min(len(pool.index), len(own.index) + len(memory))


METHODS: dict[str, Method] = {"co2l": Method(), "sd": SD(), "gm": GM(), "sd_gm": SDGM(), "finetune": Finetune(),
                              "joint": Joint()}
BASELINES = ("finetune", "joint")
