"""The arrays a train step reads: the device-resident training set and the per-sample indices of a batch."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


class DeviceData(NamedTuple):
  """The training set, resident on the device(s)."""
  images: jax.Array   # (N, H, W, C) uint8
  labels: jax.Array   # (N,) int32
  angles: jax.Array   # (slots,) float32 degrees, indexed by a sample's domain field (its slot)
  tags: jax.Array     # (slots,) int32 contrastive tag of a slot (the domain when boundaries are given)


class Batch(NamedTuple):
  """Per-sample indices of one step (all (B,)); or (S, B) for a chunk of steps."""
  index: Any
  domain: Any
  is_current: Any
  valid: Any
