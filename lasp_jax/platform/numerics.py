"""Numerical policy shared by the losses, the mask search and excitation backprop."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def full_precision(fn):
  """Traces ``fn`` with float32 matmuls at full precision (no TF32 / bf16 passes).

  GPUs and TPUs run float32 dot products in reduced precision by default (about
  1e-3 relative error). The relation matrices divide such products by a
  temperature as low as 0.01, turning that error into 0.1 in the logits, and the
  mask search (lr 100) amplifies it over 50 steps until another restart wins.
  These matmuls are tiny next to the encoder, whose convolutions keep the
  platform's default (as cuDNN's TF32 convolutions do in the PyTorch original).
  """
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with jax.default_matmul_precision("highest"):
      return fn(*args, **kwargs)
  return wrapped


def l2_normalize(x: jax.Array, axis: int = -1, eps: float = 1e-12) -> jax.Array:
  """Row L2 normalization ``x / max(||x||, eps)`` (PyTorch ``F.normalize``)."""
  norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))
  return x / jnp.maximum(norm, eps)
