"""Train state, optimizer and per-task learning-rate schedule."""

from __future__ import annotations

import functools
import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax import choices
from lasp_jax.method import modulation


@flax.struct.dataclass
class TrainState:
  """Everything the train step updates. A pytree: Orbax saves it as it is. ``memory``: the method's device memory
  (Method.init_memory; {} for a method without one)."""
  step: jax.Array
  params: Any
  batch_stats: Any
  opt_state: Any
  rng: jax.Array
  memory: Any = flax.struct.field(default_factory=dict)

  def variables(self):
    return {"params": self.params, "batch_stats": self.batch_stats}


@functools.lru_cache(maxsize=None)
def make_optimizer(*, momentum: float, weight_decay: float) -> optax.GradientTransformation:
  """PyTorch SGD (momentum, coupled weight decay on every parameter), with GM first.

  The learning rate is an injected hyperparameter, set by the train step from
  the host-computed schedule, so one compiled step serves every task. Cached: runs
  with the same settings get the same object, so their compiled chunk is shared
  (steps.make_chunk_fn).
  """

  def build(learning_rate):
    # GM's transform is in every method's chain (zero salience, an identity until GM sets it): without it XLA fuses
    # the step otherwise and the last bits of every run move (experiments.behaviour_check).
    return optax.chain(modulation.gradient_modulation(), optax.add_decayed_weights(weight_decay),
                       optax.sgd(learning_rate, momentum=momentum))

  return optax.inject_hyperparams(build)(learning_rate=0.0)


# LLVM's -O2 passes are most of the init's compile time on XLA:CPU (ResNet-18 6.6 -> 3.0 s, the R-MNIST net
# 3.0 -> 1.3 s at -O1), for a program that runs once; its bits are the same (tests/test_train_state.py).
INIT_COMPILER_OPTIONS = {"cpu": {"xla_backend_optimization_level": 1}}


@functools.lru_cache(maxsize=None)
def _create_fn(backend: str):
  return jax.jit(_create, static_argnames=("model", "tx", "sample_shape"),
                 compiler_options=INIT_COMPILER_OPTIONS.get(backend))


def _create(model, tx, sample_shape, seed):
  key = jax.random.PRNGKey(seed)
  init_key, state_key = jax.random.split(key)
  # The init does not read the sample's values, only its shape (the forward pass is traced and discarded).
  variables = model.init(init_key, jnp.zeros(sample_shape, jnp.float32), train=False)
  params = variables["params"]
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    batch_stats=variables.get("batch_stats", {}), opt_state=tx.init(params), rng=state_key)


def create_train_state(model, tx, sample_shape: tuple, seed: int) -> TrainState:
  """Parameters (PyTorch-equivalent init) and the optimizer state, as one compiled program.

  One program, not eager ops: an eager ``tx.init`` compiles a program per parameter shape
  (22 programs, ~9 s for a small ResNet). ``sample_shape``: an input batch's shape (N, H, W, C).
  The program is cached per (model, optimizer, shape), so the runs of one process share it.
  """
  return _create_fn(jax.default_backend())(model, tx, tuple(sample_shape), jnp.int32(seed))


SCHEDULES = choices.SCHEDULES


def lr_schedule(*, base_lr: float, epochs: int, steps_per_epoch: int, warmup_epochs: int = 0,
                warmup_from: float = 0.01, warmup_target_epochs: int | None = None,
                min_ratio: float = 1e-3, kind: str = "published_epoch_cosine") -> optax.Schedule:
  """The per-task learning-rate schedule as an optax schedule of the in-task step.

  ``published_epoch_cosine``: cosine annealing applied once per epoch, epochs
  counted from 1, so the last epoch runs at ``base_lr * min_ratio`` (and a task of
  one epoch runs entirely there). ``step_cosine``: the same curve evaluated at
  every step from step 0, so every task starts at ``base_lr`` whatever its
  length. Either is preceded by a per-step linear warm-up from ``warmup_from`` to
  the cosine value at the end of the warm-up. The published code computes that
  target with the later tasks' epoch count even for task 0; pass
  ``warmup_target_epochs`` to reproduce it.
  """
  if kind not in SCHEDULES:
    raise ValueError(f"unknown schedule {kind!r}; expected one of {SCHEDULES}")
  eta_min = base_lr * min_ratio

  def cosine_at_epoch(epoch, total):
    return eta_min + (base_lr - eta_min) * (1 + jnp.cos(math.pi * epoch / total)) / 2

  def cosine(step):
    if kind == "step_cosine":
      return cosine_at_epoch(step / steps_per_epoch, epochs)
    return cosine_at_epoch(step // steps_per_epoch + 1, epochs)

  if kind == "constant":
    return lambda step: jnp.full(jnp.shape(step), base_lr, jnp.float32)
  if warmup_epochs <= 0:
    return cosine
  target = cosine_at_epoch(warmup_epochs, warmup_target_epochs or epochs)
  warm_steps = warmup_epochs * steps_per_epoch
  warm = optax.linear_schedule(warmup_from, target, warm_steps)
  return optax.join_schedules([warm, lambda s: cosine(s + warm_steps)], [warm_steps])


def schedule_values(schedule: optax.Schedule, num_steps: int) -> np.ndarray:
  # Evaluated over the next power of two of steps and cut: tasks of other lengths share one compiled program
  # (a compile of ~0.05 s each otherwise); each step's value is elementwise, so the cut ones are unchanged.
  padded = 1 << max(num_steps - 1, 0).bit_length()
  return np.asarray(jax.vmap(schedule)(jnp.arange(padded)), np.float32)[:num_steps]


def task_lrs(train_cfg, *, epochs: int, steps_per_epoch: int) -> np.ndarray:
  """The learning rate of every step of a task of ``epochs`` epochs, from ``config.train`` (a read-only array)."""
  t = train_cfg
  return _task_lrs(t.lr, epochs, steps_per_epoch, t.warmup_epochs, t.warmup_from,
                   t.epochs if t.warmup_target == "published" else None, t.lr_min_ratio, t.schedule)


@functools.lru_cache(maxsize=64)
def _task_lrs(lr, epochs, steps_per_epoch, warmup_epochs, warmup_from, warmup_target_epochs, min_ratio, kind):
  # Cached: a run asks for the same task's schedule before every epoch (evaluating it took ~20 ms an epoch).
  sched = lr_schedule(base_lr=lr, epochs=epochs, steps_per_epoch=steps_per_epoch, warmup_epochs=warmup_epochs,
                      warmup_from=warmup_from, warmup_target_epochs=warmup_target_epochs, min_ratio=min_ratio,
                      kind=kind)
  values = schedule_values(sched, epochs * steps_per_epoch)
  values.flags.writeable = False
  return values
