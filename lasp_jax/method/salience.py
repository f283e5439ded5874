"""Excitation-backprop (EB) parameter salience (protocol section 6).

EB is expressed as the vector-Jacobian product of the network itself, in eval
mode, with custom VJP rules swapped in for the layers whose EB rule differs from
autograd. Flax method interceptors do the swapping, so the model code is not
duplicated:

* Dense / Conv: the EB rule on ``u+`` and ``W+`` (``|W|`` for the layers named in
  ``abs_weight_layers``), and the cotangent of the kernel is the weight salience
  ``gamma = sqrt(max(weight-gradient(P(u), p), 0))``. Bias cotangents are zero.
* BatchNorm and the final L2 normalization: salience passes unchanged; BN
  parameters get zero salience.
* Global average pool: proportional split ``u * p / (HW * (mean u + 1e-20))``.
* ReLU, max-pool, residual adds and reshapes keep ordinary autograd.

So ``jax.vjp(forward, params, x)(p_top)`` returns (gamma pytree, input salience).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from lasp_jax.model import models
from lasp_jax.platform.numerics import full_precision

_EPS = 1e-20
_state = threading.local()


@contextlib.contextmanager
def _bypass():
  """Runs the plain layer (the interceptor itself calls the layers it replaces)."""
  prev = getattr(_state, "bypass", False)
  _state.bypass = True
  try:
    yield
  finally:
    _state.bypass = prev


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _eb_affine(f, use_abs, u, kernel):
  return f(u, kernel)


def _eb_affine_fwd(f, use_abs, u, kernel):
  return f(u, kernel), (u, kernel)


def _eb_affine_bwd(f, use_abs, res, p):
  u, kernel = res
  u_pos = jnp.maximum(u, 0)
  w_pos = jnp.abs(kernel) if use_abs else jnp.maximum(kernel, 0)
  z, vjp_u = jax.vjp(lambda uu: f(uu, w_pos), u_pos)
  p_in = u_pos * jnp.maximum(vjp_u(p / (z + _EPS))[0], 0)
  _, vjp_w = jax.vjp(lambda w: f(p_in, w), w_pos)
  gamma = jnp.sqrt(jnp.maximum(vjp_w(p)[0], 0))
  return p_in, gamma


_eb_affine.defvjp(_eb_affine_fwd, _eb_affine_bwd)


@jax.custom_vjp
def _pass_through(x, y):
  """Returns y; its cotangent goes to x unchanged and nothing reaches y's inputs."""
  return y


_pass_through.defvjp(lambda x, y: (y, (x, y)),
                     lambda res, g: (g.astype(res[0].dtype), jnp.zeros_like(res[1])))


@jax.custom_vjp
def _eb_avg_pool(u):
  return jnp.mean(u, axis=(1, 2))


def _eb_avg_pool_bwd(u, p):
  hw = u.shape[1] * u.shape[2]
  return (u * (p / (hw * (jnp.mean(u, axis=(1, 2)) + _EPS)))[:, None, None, :],)


_eb_avg_pool.defvjp(lambda u: (_eb_avg_pool(u), u), _eb_avg_pool_bwd)


def _linear_part(module: nn.Module):
  """The layer's bias-free linear map f(u, kernel) built from the layer itself."""
  plain = module.clone(parent=None, use_bias=False)

  def f(u, kernel):
    with _bypass():
      return plain.apply({"params": {"kernel": kernel}}, u)

  return f


def make_interceptor(abs_weight_layers: Sequence[str]):
  """Flax method interceptor that turns a forward pass into an EB pass."""

  def interceptor(next_fun, args, kwargs, context):
    module = context.module
    if getattr(_state, "bypass", False) or context.method_name != "__call__":
      return next_fun(*args, **kwargs)
    if isinstance(module, (nn.Dense, nn.Conv)):
      u = args[0]
      params = module.variables["params"]
      use_abs = "/".join(module.scope.path) in abs_weight_layers
      out = _eb_affine(_linear_part(module), use_abs, u, params["kernel"])
      if module.use_bias:
        out = out + jax.lax.stop_gradient(params["bias"]).astype(out.dtype)
      return out
    if isinstance(module, (nn.BatchNorm, models.L2Normalize)):
      return _pass_through(args[0], next_fun(*args, **kwargs))
    if isinstance(module, models.GlobalAvgPool):
      return _eb_avg_pool(args[0])
    return next_fun(*args, **kwargs)

  return interceptor


@full_precision
def excitation_backprop(model: nn.Module, variables, x: jax.Array, p_top: jax.Array,
                        abs_weight_layers: Sequence[str] = ("head/fc2",), replicas: int = 1):
  """EB salience of every parameter and of the input.

  ``replicas = G > 1`` reproduces the published runs' two-GPU ``nn.DataParallel``,
  which wrapped the encoder only: for the encoder's parameters the batch is cut into
  G contiguous chunks of ceil(N / G) rows (``torch.chunk``), each replica takes the
  square root of its own weight gradient and the replicas' results are summed, so
  gamma = sum_g sqrt(G_g) instead of sqrt(sum_g G_g); the projection head ran on the
  gathered batch, so its gamma is the whole batch's. Per-row quantities (the input
  salience) are unchanged.

  Args:
    model: a :class:`models.Model` (run in eval mode).
    variables: its variables (``params`` and, for ResNets, ``batch_stats``).
    x: (N, H, W, C) input batch.
    p_top: (N, D) salience at the embedding (the chosen mask times its accuracy).
    abs_weight_layers: layers whose EB uses |W| instead of max(W, 0).

  Returns:
    (gamma, input_salience): gamma has the structure of ``variables['params']``.
  """
  rest = {k: v for k, v in variables.items() if k != "params"}
  interceptor = make_interceptor(tuple(abs_weight_layers))

  def forward(params, x):
    with nn.intercept_methods(interceptor):
      return model.apply({"params": params, **rest}, x, train=False)[1]

  size = -(-x.shape[0] // replicas)
  parts = []
  for start in range(0, x.shape[0], size):
    _, vjp = jax.vjp(forward, variables["params"], x[start:start + size])
    parts.append(vjp(p_top[start:start + size].astype(jnp.float32)))
  gamma = jax.tree.map(lambda *g: sum(g[1:], g[0]), *[g for g, _ in parts])
  if len(parts) > 1:
    _, vjp = jax.vjp(forward, variables["params"], x)
    gamma = {**gamma, "head": vjp(p_top.astype(jnp.float32))[0]["head"]}
  return gamma, jnp.concatenate([p for _, p in parts])
