"""Where the train step's time goes, per part, on this machine: one line per part.

    python -m perf.profile_step [--config=configs/mnist5k.py] [--config.model.batch_norm=False]

Times (median of --repeats calls after a compile call) of: the whole compiled step
without and with the past model (a chunk of ``train.steps_per_call`` steps, per step),
the two-view augmentation of one batch, the model's train-mode forward on the
2B views, and forward + backward of the same. The difference between the step
with and without a past model is the past model's forward and IRD.
"""

from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from ml_collections import config_flags

from lasp_jax import errors, train
from lasp_jax.data import augment
from lasp_jax.loop import steps
from lasp_jax.method import pools
from perf import roofline

_CONFIG = config_flags.DEFINE_config_file("config", "configs/mnist5k.py", "Run configuration.", lock_config=True)
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per part.", lower_bound=1)


def median_ms(fn, repeats: int) -> float:
  return 1000 * roofline.median_seconds(fn, (), repeats)


def main(argv):
  del argv
  c = _CONFIG.value
  c.progress = False
  ctx, carry = train.build(c, tempfile.mkdtemp())
  spc, b = c.train.steps_per_call, c.train.batch_size
  pool = pools.training_pool(ctx.stream, carry.memory, 0)
  chunk = steps.Batch(*[jnp.asarray(f[0]) for f in steps.epoch_batches(pool, b, spc, np.random.default_rng(0))])
  mask, lrs = jnp.ones(ctx.config.model.embedding_dim, bool), jnp.full((spc,), 0.01)
  past = steps.PastModel(*jax.tree.map(jnp.copy, (carry.state.params, carry.state.batch_stats)))

  def step(p):
    def go():
      carry.state, m = ctx.chunk_fn(carry.state, p, mask, carry.data, chunk, lrs)  # the state is donated
      return m
    return go

  idx = chunk.index[0]
  angles = carry.data.angles[jnp.zeros_like(idx)]
  aug = jax.jit(lambda k: augment.two_views(k, carry.data.images[idx], angles, ctx.aug_cfg))
  views = aug(jax.random.PRNGKey(0))
  v = carry.state.variables()
  apply = lambda p, x: ctx.model.apply({"params": p, "batch_stats": v["batch_stats"]}, x, train=True,
                                       mutable=["batch_stats"])[0][1]
  fwd = jax.jit(apply)
  fwd_bwd = jax.jit(jax.grad(lambda p, x: jnp.sum(apply(p, x) ** 2)))
  rows = [("step, no past model (per step)", median_ms(step(None), _REPEATS.value) / spc),
          ("step, with past model (per step)", median_ms(step(past), _REPEATS.value) / spc),
          ("two-view augmentation", median_ms(lambda: aug(jax.random.PRNGKey(1)), _REPEATS.value)),
          ("forward, 2B views, train mode", median_ms(lambda: fwd(carry.state.params, views), _REPEATS.value)),
          ("forward + backward", median_ms(lambda: fwd_bwd(carry.state.params, views), _REPEATS.value))]
  print(f"{c.model.name} width {c.model.width} batch_norm {c.model.get('batch_norm', False)}, batch {b} "
        f"({2 * b} views), {jax.devices()[0].device_kind}")
  for name, ms in rows:
    print(f"{name:36} {ms:8.2f} ms")


if __name__ == "__main__":
  errors.run_app(main)
