"""Inner products of per-sample loss gradients without forming them, for networks of dense layers.

For a dense layer y = x W + b and a loss summed over rows, sample i's gradient is (outer(x_i, d_i), d_i) with d_i its
row of dL/dy, so <g_i, g_j> = (x_i . x_j)(d_i . d_j) + d_i . d_j: one forward and one backward of the batch give
every pair's inner product, summed over the layers, in O(n^2 (fan_in + fan_out)) instead of n gradients of every
weight (GSS scores 256 rows of a 90k-weight MLP each step: 1.5 GFLOP of cosines becomes ~30 MFLOP). It holds only
when every weight the loss reaches is a dense layer's, applied once to (rows, features); ``dense_gram`` returns None
otherwise (convolutions, batch norm, a layer applied twice) and ``gram_blocks`` then forms the gradients.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def _dense_calls(model, variables, images, perturb=None):
  """Apply ``model`` (eval mode), recording each module call as (path, the dense layer or None, input, output) in
  call order; ``perturb`` (one array per dense call, in that order) is added to the dense layers' outputs."""
  calls = []

  def record(next_fun, args, kwargs, context):
    y = next_fun(*args, **kwargs)
    if context.method_name != "__call__":
      return y
    dense = context.module if isinstance(context.module, nn.Dense) else None
    if dense is not None and perturb is not None:
      y = y + perturb[sum(c[1] is not None for c in calls)].astype(y.dtype)
    calls.append((context.module.path, dense, None if dense is None else args[0], y))
    return y

  with nn.intercept_methods(record):
    out = model.apply(variables, images, train=False)
  return out, calls


def _supported(params, calls) -> bool:
  """Every parameter's module is a dense layer called once on (rows, features), or is never called."""
  dense = [c for c in calls if c[1] is not None]
  dense_paths = {c[0] for c in dense}
  if any(c[2].ndim != 2 for c in dense) or len(dense_paths) != len(dense):
    return False
  called = {c[0] for c in calls}
  owners = {tuple(k.key for k in path[:-1]) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]}
  return all(o in dense_paths or o not in called for o in owners)


def dense_gram(model, variables, images, labels, loss: Callable) -> Optional[jax.Array]:
  """K[i, j] = <grad of loss(row i), grad of loss(row j)> over the parameters, (n, n); None where the dense-layer
  identity does not hold (see the module's docstring). ``loss(logits, labels)`` returns one loss per row; the model
  returns (features, logits) and runs in eval mode (rows independent)."""
  _, calls = _dense_calls(model, variables, images)  # traced for the check and the shapes; XLA drops it
  if not _supported(variables["params"], calls):
    return None

  def total(perturb):
    (_, logits), calls = _dense_calls(model, variables, images, perturb)
    return jnp.sum(loss(logits, labels)), [c[2].astype(jnp.float32) for c in calls if c[1] is not None]

  dense = [c for c in calls if c[1] is not None]
  deltas, inputs = jax.grad(total, has_aux=True)([jnp.zeros(c[3].shape, jnp.float32) for c in dense])
  k = jnp.zeros((images.shape[0], images.shape[0]), jnp.float32)
  for x, d, c in zip(inputs, deltas, dense):
    dd = d @ d.T
    k = k + (x @ x.T + c[1].use_bias) * dd  # the kernel's term, and the bias's where there is one
  return k


class GramBlocks(NamedTuple):
  """What GSS reads of K, the Gram matrix of the rows' loss gradients, for ``n`` stream rows then ``m`` drawn ones."""
  cross: jax.Array     # K[:n, n:], (n, m)
  diag: jax.Array      # K's diagonal, (n + m,): each row's squared gradient norm
  weighted: jax.Array  # w K[:n, :n] w: the squared norm of the stream rows' gradients summed with weights w


def row_gradients(model, variables, images, labels, loss: Callable) -> jax.Array:
  """Each row's loss gradient over the parameters, flattened: (rows, parameters)."""

  def one(image, label):
    row = lambda p: loss(model.apply({**variables, "params": p}, image[None], train=False)[1], label[None])[0]
    return ravel_pytree(jax.grad(row)(variables["params"]))[0]

  return jax.vmap(one)(images, labels)


def blocks_of_rows(g, *, n: int, weights) -> GramBlocks:
  """GramBlocks from the rows' gradients ``g`` without the whole K: (n m + n + m) products of a gradient's length,
  not (n + m)^2."""
  return GramBlocks(g[:n] @ g[n:].T, jnp.sum(g * g, axis=1), jnp.sum((weights @ g[:n]) ** 2))


def gram_blocks(model, variables, images, labels, loss: Callable, *, n: int, weights) -> GramBlocks:
  """GramBlocks of ``images``' first ``n`` rows against the rest, weights ``weights`` (n,): from ``dense_gram``
  where it holds, else from the rows' gradients themselves."""
  k = dense_gram(model, variables, images, labels, loss)
  if k is None:
    return blocks_of_rows(row_gradients(model, variables, images, labels, loss), n=n, weights=weights)
  return GramBlocks(k[:n, n:], jnp.diagonal(k), weights @ k[:n, :n] @ weights)
