"""A convolution whose backward pass is two matrix products (im2col), for XLA:CPU.

XLA:CPU runs forward convolutions at a reasonable rate, but its convolution
gradients are several times slower than a matmul of the same size (measured
here: a 3x3, 64->64 conv on 64 x 32 x 32 images takes 104 ms forward and 1.3 s
forward+backward; with this backward 0.33 s). The forward is the ordinary
``lax.conv_general_dilated``; the backward forms the patch matrix and uses
matmuls (weight gradient) and strided pads (input gradient). It is used for
NHWC/HWIO convolutions without dilation or groups, and only on CPU by default:
cuDNN's own gradients are the right choice on a GPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax


def _patches(xp, kh, kw, strides, out_hw):
  """(N, Ho, Wo, kh * kw * C) patches of the padded input, (i, j, c) order."""
  (sh, sw), (ho, wo) = strides, out_hw
  return jnp.concatenate([xp[:, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw, :]
                          for i in range(kh) for j in range(kw)], axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _conv(x, k, strides, padding):
  return lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _conv_fwd(x, k, strides, padding):
  return _conv(x, k, strides, padding), (x, k)


def _conv_bwd(strides, padding, res, dy):
  x, k = res
  kh, kw, c, o = k.shape
  n, ho, wo, _ = dy.shape
  xp = jnp.pad(x, ((0, 0), padding[0], padding[1], (0, 0)))
  cols = _patches(xp, kh, kw, strides, (ho, wo)).reshape(-1, kh * kw * c)
  dy2 = dy.reshape(-1, o)
  dk = (cols.T @ dy2).reshape(k.shape).astype(k.dtype)
  dcols = (dy2 @ k.reshape(-1, o).T).reshape(n, ho, wo, kh, kw, c)
  hp, wp = xp.shape[1], xp.shape[2]
  (sh, sw) = strides
  dxp = jnp.zeros(xp.shape, dy.dtype)
  for i in range(kh):
    for j in range(kw):
      cfg = [(0, 0, 0), (i, hp - i - sh * (ho - 1) - 1, sh - 1), (j, wp - j - sw * (wo - 1) - 1, sw - 1), (0, 0, 0)]
      dxp = dxp + lax.pad(dcols[:, :, :, i, j, :], jnp.zeros((), dy.dtype), cfg)
  dx = dxp[:, padding[0][0]:hp - padding[0][1], padding[1][0]:wp - padding[1][1], :].astype(x.dtype)
  return dx, dk


_conv.defvjp(_conv_fwd, _conv_bwd)


def matmul_grad_conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                     dimension_numbers=None, feature_group_count=1, precision=None, **kw):
  """Drop-in for ``lax.conv_general_dilated`` (the signature Flax's nn.Conv calls).

  Falls back to the plain convolution for anything but undilated, ungrouped
  NHWC/HWIO convolutions with explicit padding.
  """
  plain = (lhs_dilation in (None, (1, 1)) and rhs_dilation in (None, (1, 1)) and feature_group_count == 1
           and not isinstance(padding, str) and not kw
           and (dimension_numbers is None or tuple(getattr(dimension_numbers, "lhs_spec", ())) == (0, 3, 1, 2)
                or dimension_numbers == ("NHWC", "HWIO", "NHWC")))
  if not plain:
    return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                    dimension_numbers, feature_group_count, precision=precision, **kw)
  return _conv(lhs, rhs, tuple(window_strides), tuple(tuple(p) for p in padding))


def conv_for_backend(choice: str = "auto"):
  """The conv function for nn.Conv: ``matmul_grad_conv`` on CPU (auto) or when asked."""
  if choice == "matmul" or (choice == "auto" and jax.default_backend() == "cpu"):
    return matmul_grad_conv
  if choice in ("auto", "xla"):
    return None
  raise ValueError(f"unknown model.conv_backward {choice!r}; expected auto, matmul or xla")
