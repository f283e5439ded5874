"""Eval-mode features of training or test images, batched: what the read-outs, the task-free detector and a method
choosing its exemplars (iCaRL's herding) read."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax.data import augment
from lasp_jax.model import models


def encode(model, variables, images):
  return model.apply(variables, images, train=False, method=models.Model.encode)


@functools.partial(jax.jit, static_argnames=("model", "aug_cfg", "kind"))
def _features(variables, images, angles, index, domain, *, model, aug_cfg, kind):
  # The batch's gather is inside the program: indexing the device arrays eagerly compiled a program of its
  # own per shape (40-70 ms each on the 2-core CPU, a dozen per run).
  x = augment.test_transform(images[index], angles[domain], aug_cfg)
  if kind == "pixels":
    return x.reshape(x.shape[0], -1)
  return model.apply(variables, x, train=False)[1] if kind == "embedding" else encode(model, variables, x)


def extract_features(model, variables, data, index, domain, aug_cfg, batch_size: int = 500, kind: str = "encoder"):
  """Eval-mode features of ``data.images[index]``, batched, of one ``kind``.

  ``encoder``: the representation the probe reads; ``embedding``: the projection
  head's output; ``pixels``: the test-transformed image itself, flattened (the
  raw-pixel baseline). No augmentation; the last batch is padded so every call
  has the same shape.
  """
  n = len(index)
  pad = (-n) % batch_size
  index = np.concatenate([np.asarray(index), np.zeros(pad, np.int64)]).astype(np.int32)
  domain = np.concatenate([np.asarray(domain), np.zeros(pad, np.int64)]).astype(np.int32)
  out = [_features(variables, data.images, data.angles, index[i:i + batch_size], domain[i:i + batch_size],
                   model=model, aug_cfg=aug_cfg, kind=kind) for i in range(0, len(index), batch_size)]
  return jnp.asarray(np.concatenate([np.asarray(o) for o in out])[:n])  # joined on the host: no program
