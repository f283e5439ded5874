"""Gradient modulation (GM) from excitation-backprop salience, as an optax transform.

``grad <- grad * (1 - min(1, gamma))`` for weights (conv and dense kernels,
BatchNorm scales); biases pass unchanged. Chain it *before* weight decay and
momentum, as the published code modulates the raw loss gradient only.
gamma lives in the transform's state: it is checkpointed with the optimizer and
swapped at a task boundary by :func:`set_salience` without recompiling anything.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

MODULATED_LEAVES = ("kernel", "scale")


def is_weight_path(path) -> bool:
  """True for leaves named 'kernel' or 'scale' (the PyTorch '...weight' params)."""
  last = path[-1]
  name = getattr(last, "key", getattr(last, "name", str(last)))
  return name in MODULATED_LEAVES


def modulate(grads, gamma):
  """Applies ``g * (1 - min(1, gamma))`` to the weights of ``grads``."""
  return jax.tree_util.tree_map_with_path(
      lambda p, g, s: g * (1 - jnp.minimum(1.0, s)).astype(g.dtype) if is_weight_path(p) else g,
      grads, gamma)


class SalienceState(NamedTuple):
  gamma: optax.Params


def gradient_modulation() -> optax.GradientTransformation:
  """optax transform holding gamma (zeros, i.e. no modulation, until set)."""

  def init_fn(params):
    return SalienceState(jax.tree.map(jnp.zeros_like, params))

  def update_fn(updates, state, params=None):
    del params
    return modulate(updates, state.gamma), state

  return optax.GradientTransformation(init_fn, update_fn)


def set_salience(opt_state, gamma):
  """Returns ``opt_state`` with every SalienceState's gamma replaced by ``gamma``."""

  def swap(node):
    if isinstance(node, SalienceState):
      return SalienceState(jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), gamma, node.gamma))
    return node

  return jax.tree.map(swap, opt_state, is_leaf=lambda n: isinstance(n, SalienceState))


def get_salience(opt_state):
  """The gamma pytree held in ``opt_state``."""
  found = [n for n in jax.tree.leaves(opt_state, is_leaf=lambda n: isinstance(n, SalienceState))
           if isinstance(n, SalienceState)]
  if len(found) != 1:
    raise ValueError(f"expected one gradient_modulation state, found {len(found)}")
  return found[0].gamma
