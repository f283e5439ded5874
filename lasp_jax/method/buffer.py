"""A replay memory on the device, written inside the train step by reservoir sampling (Vitter's algorithm R).

A row holds a training sample by reference (its index into the device-resident images and the slot whose
rotation it was seen at: the image is the one the stream showed), its label, and for the DER family the logits
the model gave it when it entered. The arrays have a fixed shape (``capacity`` rows), so the buffer is part of
the train state: donated, checkpointed and vmapped over seeds with it.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp


class Buffer(NamedTuple):
  index: jax.Array    # (capacity,) int32: the sample's row in the training images
  domain: jax.Array   # (capacity,) int32: its slot (rotation angle, contrastive tag)
  label: jax.Array    # (capacity,) int32
  task: jax.Array     # (capacity,) int32: the task it came from
  logits: Optional[jax.Array]  # (capacity, C) float32 at insertion, or None when not kept
  seen: jax.Array     # () int32: stream samples offered so far


def empty(capacity: int, num_logits: int = 0) -> Buffer:
  zeros = lambda: jnp.zeros(capacity, jnp.int32)  # a buffer each: the step donates them one by one
  logits = jnp.zeros((capacity, num_logits), jnp.float32) if num_logits else None  # (Orbax saves no empty array)
  return Buffer(zeros(), zeros(), zeros(), zeros(), logits, jnp.zeros((), jnp.int32))


def filled(buf: Buffer) -> jax.Array:
  """Rows holding a sample: min(seen, capacity) (a reservoir fills its slots in order)."""
  return jnp.minimum(buf.seen, buf.index.shape[0])


def reservoir_slots(key, seen, valid, capacity: int) -> jax.Array:
  """The slot each row of a batch is written to (``capacity``: not kept), as if the valid rows were offered one
  by one after ``seen`` others: the n-th sample offered (0-based) fills slot n while n < capacity, else replaces
  slot r ~ U{0..n} when r < capacity. Where two rows of the batch draw one slot the later wins, as it would
  sequentially."""
  valid = valid.astype(jnp.int32)
  n = seen + jnp.cumsum(valid) - valid                      # samples offered before this row
  r = jax.random.randint(key, valid.shape, 0, n + 1)         # uniform over 0..n
  slot = jnp.where(n < capacity, n, r)
  write = (valid > 0) & (slot < capacity)
  rows = jnp.arange(valid.shape[0])
  later = (slot[None, :] == slot[:, None]) & write[None, :] & (rows[None, :] > rows[:, None])
  write = write & ~jnp.any(later, axis=1)
  return jnp.where(write, slot, capacity)


def insert(buf: Buffer, key, *, index, domain, label, task, logits, valid) -> Buffer:
  """The buffer after the batch's valid rows are offered to it (reservoir_slots)."""
  capacity = buf.index.shape[0]
  slot = reservoir_slots(key, buf.seen, valid, capacity)
  put = lambda field, rows: field.at[slot].set(rows.astype(field.dtype), mode="drop")
  kept = None if buf.logits is None else put(buf.logits, logits)
  return Buffer(put(buf.index, index), put(buf.domain, domain), put(buf.label, label), put(buf.task, task), kept,
                buf.seen + jnp.sum(valid).astype(jnp.int32))


def draw(buf: Buffer, key, size: int) -> tuple[jax.Array, jax.Array]:
  """(slots, valid): ``size`` distinct filled rows drawn uniformly (without replacement, as mammoth's
  ``get_data``); while fewer than ``size`` are filled, the extra rows are marked invalid."""
  capacity = buf.index.shape[0]
  size = min(size, capacity)
  score = jnp.where(jnp.arange(capacity) < filled(buf), jax.random.uniform(key, (capacity,)), 2.0)
  _, slots = jax.lax.top_k(-score, size)                      # the filled rows first, in random order
  return slots, jnp.arange(size) < filled(buf)
