"""The contrastive family: Co2L, LASP's SD and GM, and their bounds.

One step: two augmented views of the batch (task data + the host replay memory), the current (and frozen past)
model, asymmetric SupCon + lambda x the method's distillation term against the past model. At every boundary
the past model is the model as the segment ended; the look-ahead methods (SD, GM) then search the new data for
the embedding dims that still separate the classes (SD distils only those) and the weights behind them (GM
slows those). Read out by a probe on the frozen encoder.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax
import jax.numpy as jnp
import tqdm

from lasp_jax.data import augment
from lasp_jax.method import losses, modulation, pools, references
from lasp_jax.method.base import Method, Observation, StepInputs, embedding_stats, forward


@dataclasses.dataclass(frozen=True)
class Settings:
  """Static settings of the contrastive step (hashable)."""
  temperature: float
  base_temperature: float
  temp_cur: float
  temp_past: float
  ird_weight: float
  method: Any              # the Co2L object: its distillation term (SD: IRD on the salient subset)
  past_bn: str             # "batch" (train-mode stats) or "running" (eval mode)
  domain_classes: int      # >0: SupCon label = label + domain_classes * tag of the sample's slot
  batch_size: int = 0      # the rows a step's augmentation draws for: a short tail step draws as its padded self


def contrastive_labels(labels, domain, cfg: Settings):
  return labels + cfg.domain_classes * domain if cfg.domain_classes else labels


class Co2L(Method):
  """Co2L: asymmetric SupCon on the current task and the replay memory, IRD against the past model."""
  family = "contrastive"
  metrics = ("loss", "supcon", "ird", "z_norm", "z_var")
  progress_keys = ("loss", "ird")
  pool_replay = True
  distills = True
  ird_weight = 1.0   # the published --distill_power

  def settings(self, config, stream) -> Settings:
    t = config.train
    return Settings(temperature=t.temperature, base_temperature=t.base_temperature, temp_cur=t.ird_temp_cur,
                    temp_past=t.ird_temp_past, ird_weight=self.distillation_weight(config), method=self,
                    past_bn=config.model.past_bn, domain_classes=stream.contrastive_offset,
                    batch_size=t.batch_size)

  def distillation(self, *, z_cur, z_past, dim_mask, temp_cur, temp_past, valid):
    """The loss's distillation term: IRD on every embedding dim."""
    del dim_mask
    return losses.ird_loss(z_cur=z_cur, z_past=z_past, temp_cur=temp_cur, temp_past=temp_past, valid=valid)

  def objective(self, params, state, past, dim_mask, views, labels, batch, model, cfg: Settings):
    """SupCon + lambda x distillation on the two views: (loss, (supcon, distillation, embedding stats, stats))."""
    row_valid = jnp.concatenate([batch.valid, batch.valid])
    (_, z), new_stats = forward(model, {"params": params, "batch_stats": state.batch_stats}, views, train=True,
                                mask=row_valid)
    supcon = losses.supcon_loss(features=z, labels=labels, is_current=batch.is_current, valid=batch.valid,
                                temperature=cfg.temperature, base_temperature=cfg.base_temperature)
    stats = embedding_stats(jax.lax.stop_gradient(z).astype(jnp.float32), row_valid)
    if past is None:  # no distillation term at all: the program is then the same for every method (one compile)
      return supcon, (supcon, jnp.zeros((), jnp.float32), stats, new_stats)
    (_, z_past), _ = forward(model, past._asdict(), views, train=cfg.past_bn == "batch", mask=row_valid)
    ird = self.distillation(dim_mask=dim_mask, z_cur=z, z_past=jax.lax.stop_gradient(z_past),
                            temp_cur=cfg.temp_cur, temp_past=cfg.temp_past, valid=batch.valid)
    return supcon + cfg.ird_weight * ird, (supcon, ird, stats, new_stats)

  def observe(self, s: StepInputs, *, model, aug_cfg, cfg: Settings) -> Observation:
    views = augment.two_views(s.key, s.data.images[s.batch.index], s.data.angles[s.batch.domain], aug_cfg,
                              rows=cfg.batch_size)
    # Without the barrier XLA:CPU fuses the augmentation into the conv inputs and
    # recomputes it per use: 6x slower steps on the R-MNIST net (measured).
    views = jax.lax.optimization_barrier(views)
    labels = contrastive_labels(s.data.labels[s.batch.index], s.data.tags[s.batch.domain], cfg)
    grad_fn = jax.value_and_grad(self.objective, has_aux=True)
    (loss, (supcon, ird, (z_norm, z_var), new_stats)), grads = grad_fn(
        s.state.params, s.state, s.past, s.dim_mask, views, labels, s.batch, model, cfg)
    return Observation(grads, new_stats, s.state.memory,
                       {"loss": loss, "supcon": supcon, "ird": ird, "z_norm": z_norm, "z_var": z_var})

  def take_lookahead(self, rs, state, res, *, task: int):
    """What the boundary's look-ahead result ``res`` (lookahead.BoundaryResult) changes: the run state ``rs``
    and the train state it returns. Co2L takes nothing."""
    del rs, res, task
    return state

  def reference_values(self, chunks, config) -> dict:
    """SupCon's value for a constant embedding and IRD's for uniform relations, on the epoch's batches."""
    t = config.train
    return references.reference_values(chunks, temperature=t.temperature, base_temperature=t.base_temperature)


class LookAhead(Co2L):
  """A method that looks ahead at every boundary: Co2L's past model, then the look-ahead, then what it takes."""
  looks_ahead = True

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
    return losses.selective_ird_loss(z_cur=z_cur, z_past=z_past, dim_mask=dim_mask, temp_cur=temp_cur,
                                     temp_past=temp_past, valid=valid)

  def take_lookahead(self, rs, state, res, *, task: int):
    """The searched subset becomes the mask the step distils (all dims when it kept <= 1: full IRD)."""
    rs.mask = res.mask.tolist()
    if res.info["sd_fallback_to_full_ird"]:
      tqdm.tqdm.write(f"task {task}: salient subset has {res.info['selected_dims']} dim(s); SD falls back to "
                      f"full IRD", file=sys.stderr)
    return super().take_lookahead(rs, state, res, task=task)


class GM(LookAhead):
  """LASP's gradient modulation: full IRD; weight gradients times 1 - min(1, gamma) from EB salience."""
  modulates = True

  def take_lookahead(self, rs, state, res, *, task: int):
    """The EB salience goes into the optimizer state, where the modulation reads it."""
    state = super().take_lookahead(rs, state, res, task=task)
    return state.replace(opt_state=modulation.set_salience(state.opt_state, res.gamma))


class SDGM(SD, GM):
  """Both of LASP's parts (SD's distillation and weight, GM's modulation)."""
  published_srs_data = {}  # no published command: the look-ahead on the current data


class Finetune(Co2L):
  """Lower bound: SupCon on each task alone, no replay, no distillation (the memory feeds only the probe)."""
  pool_replay = False
  distills = False
  ird_weight = 0.0


class Joint(Finetune):
  """Upper bound: every task so far at once, an epoch drawing as many samples as a replay method's."""
  cumulative = True

  def pool(self, stream, memory, t: int, slot=None, state=None):
    own = pools.task_pool(stream, t, slot)
    pool = pools.concat_pools(*[pools.task_pool(stream, j) for j in range(t + 1)])
    return pool, min(len(pool.index), len(own.index) + len(memory))
