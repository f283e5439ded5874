"""Convolutions with custom gradients for XLA:CPU: im2col matmuls, or forward convolutions.

``conv_grad_conv`` (``model.conv_backward=conv``, the CPU choice of both nets) computes a
stride-1 convolution's gradients as canonical NHWC/HWIO forward convolutions (see
``_conv_s1_bwd``; the input gradient as a matmul and col2im instead where the full
correlation would do at least twice the convolution's work, as for the R-MNIST net's
conv2) and strided ones with im2col; a stride-1 convolution of a one-channel
image (the R-MNIST net's conv1) is one matmul against a row-Toeplitz weight matrix
(``_one_channel_conv``). ``matmul_grad_conv`` uses im2col for all.
The rest of this docstring describes the im2col path.

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
import numpy as np
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


def _col2im_dx(dy, k, strides, padding, x_shape):
  """The input gradient as one matmul (``dy @ k^T``: each output pixel's patch gradient) and col2im.

  Only the convolution's own multiply-adds, then a sum of kh*kw shifted (for strides, dilated)
  slices that XLA fuses into one loop. The im2col path's input gradient at every stride, and the
  stride-1 one where the full correlation would waste work (``_conv_s1_bwd``): for the R-MNIST
  net's conv2 (512 images, 2-core AMD EPYC) 55-60 ms against the full correlation's
  120 ms (BENCHMARKS.md).
  """
  kh, kw, c, o = k.shape
  n, ho, wo, _ = dy.shape
  (sh, sw), ((pt, pb), (pl, pr)) = strides, padding
  hp, wp = x_shape[1] + pt + pb, x_shape[2] + pl + pr
  dcols = (dy.reshape(-1, o) @ k.reshape(-1, o).T).reshape(n, ho, wo, kh, kw, c)
  dxp = jnp.zeros((n, hp, wp, c), dy.dtype)
  for i in range(kh):
    for j in range(kw):
      cfg = [(0, 0, 0), (i, hp - i - sh * (ho - 1) - 1, sh - 1), (j, wp - j - sw * (wo - 1) - 1, sw - 1), (0, 0, 0)]
      dxp = dxp + lax.pad(dcols[:, :, :, i, j, :], jnp.zeros((), dy.dtype), cfg)
  return dxp[:, pt:hp - pb, pl:wp - pr, :]


def _conv_bwd(strides, padding, res, dy):
  x, k = res
  kh, kw, c, o = k.shape
  _, ho, wo, _ = dy.shape
  xp = jnp.pad(x, ((0, 0), padding[0], padding[1], (0, 0)))
  cols = _patches(xp, kh, kw, strides, (ho, wo)).reshape(-1, kh * kw * c)
  dk = (cols.T @ dy.reshape(-1, o)).reshape(k.shape).astype(k.dtype)
  return _col2im_dx(dy, k, strides, padding, x.shape).astype(x.dtype), dk


_conv.defvjp(_conv_fwd, _conv_bwd)


def _fwd_conv(lhs, rhs, padding):
  return lax.conv_general_dilated(lhs, rhs, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv_s1(x, k, padding):
  return _fwd_conv(x, k, padding)


def _conv_s1_fwd(x, k, padding):
  return _conv_s1(x, k, padding), (x, k)


def _conv_s1_bwd(padding, res, dy):
  """Both gradients of a stride-1 convolution as stride-1 NHWC/HWIO forward convolutions.

  XLA:CPU's own kernel runs those near its matmul rate, while the convolutions that
  JAX's autodiff emits (transposed dimension numbers) and the im2col gradients
  (a kh*kw-times larger patch matrix, then col2im) run 3-8x slower on the ResNet
  shapes (BENCHMARKS.md).
  """
  x, k = res
  kh, kw = k.shape[:2]
  (pt, pb), (pl, pr) = padding
  if _full_correlation_waste(x.shape, dy.shape) >= _COL2IM_MIN_WASTE:
    dx = _col2im_dx(dy, k, (1, 1), padding, x.shape)
  else:
    # dx: full correlation of dy with the flipped kernel, its in/out channels swapped.
    dx = _fwd_conv(dy, jnp.flip(k, (0, 1)).transpose(0, 1, 3, 2),
                   ((kh - 1 - pt, kh - 1 - pb), (kw - 1 - pl, kw - 1 - pr)))
  # dk[i, j, c, o] = sum_{n,h,w} xp[n, h+i, w+j, c] dy[n, h, w, o]: a convolution over the
  # spatial dims with the batch as the contracted feature dim (x as C,H,W,N; dy as H,W,N,O).
  dk = _fwd_conv(x.transpose(3, 1, 2, 0), dy.transpose(1, 2, 0, 3), padding).transpose(1, 2, 0, 3)
  return dx.astype(x.dtype), dk.astype(k.dtype)


_conv_s1.defvjp(_conv_s1_fwd, _conv_s1_bwd)


# A stride-1 input gradient takes col2im once the full correlation would do this many times the
# convolution's multiply-adds (see _full_correlation_waste).
_COL2IM_MIN_WASTE = 2.0


def _full_correlation_waste(x_shape, dy_shape) -> float:
  """The full correlation's multiply-adds over the convolution's: (input area) / (output area).

  The full correlation slides the kernel over every input position, the convolution over every
  output position. The R-MNIST net's conv2 (5x5 VALID, 12x12 -> 8x8): 2.25; a padded 3x3
  "SAME" convolution (ResNet): 1.
  """
  return (x_shape[1] * x_shape[2]) / (dy_shape[1] * dy_shape[2])


# Output columns per row tile of ``_one_channel_conv``: 8 ran conv1 (28x28 -> 24x24x20, 512 images)
# forward in 4.1 ms against 6.3 (4), 6.9 (12), 8.6 (24) and XLA's 15.8 ms on a 2-vCPU Intel Xeon;
# on AMD EPYC 15.9 ms against 12.5 (4), 14.7 (6) and XLA's 29.6, with no difference the
# whole step's noise could show (BENCHMARKS.md).
_TILE = 8


def _one_channel_conv(x, k, padding):
  """A stride-1 NHWC/HWIO convolution of a one-channel image as a single matmul.

  XLA:CPU's convolution kernel runs a 5x5 1->20 convolution at ~25 GFLOP/s (one input
  channel leaves its inner loop nothing to vectorize over) and its weight gradient needs a
  layout transpose of the whole output gradient. Here each output row is split in tiles of
  ``t`` columns; a tile's ``kh`` input rows of ``t + kw - 1`` pixels (K values) times a
  (K, t * O) row-Toeplitz matrix built from the kernel gives the tile's t x O outputs. That
  does (t + kw - 1) / kw times the convolution's multiply-adds, as one well-shaped matmul
  whose output is already NHWC; the kernel's gradient is JAX's gradient of that matmul and
  of the (constant) Toeplitz construction. Values agree with XLA's to float32 rounding
  (tests/test_conv.py).
  """
  (pt, pb), (pl, pr) = padding
  xp = jnp.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
  n, hp, wp, _ = xp.shape
  kh, kw, _, o = k.shape
  ho, wo = hp - kh + 1, wp - kw + 1
  t = max(d for d in range(1, min(_TILE, wo) + 1) if wo % d == 0)
  u = t + kw - 1
  rows = jnp.stack([xp[:, i:i + ho, :, 0] for i in range(kh)], axis=2)  # (n, ho, kh, wp)
  tiles = jnp.stack([rows[:, :, :, j * t:j * t + u] for j in range(wo // t)], axis=2)  # (n, ho, wo/t, kh, u)
  # select[p, v, j] = 1 where input column p of a tile meets kernel column j at output column v.
  select = np.zeros((u, t, kw), np.float32)
  for v in range(t):
    select[v + np.arange(kw), v, np.arange(kw)] = 1
  toeplitz = jnp.einsum("pvj,ijo->ipvo", select.astype(k.dtype), k[:, :, 0, :]).reshape(kh * u, t * o)
  y = tiles.reshape(-1, kh * u) @ toeplitz
  return y.reshape(n, ho, wo, o)


def plain(lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count, padding, kw) -> bool:
  """Undilated, ungrouped NHWC/HWIO with explicit padding: what the custom gradients handle."""
  return (lhs_dilation in (None, (1, 1)) and rhs_dilation in (None, (1, 1)) and feature_group_count == 1
          and not isinstance(padding, str) and not kw
          and (dimension_numbers is None or tuple(getattr(dimension_numbers, "lhs_spec", ())) == (0, 3, 1, 2)
               or dimension_numbers == ("NHWC", "HWIO", "NHWC")))


def _custom_grad_conv(stride1_grads):
  """A drop-in for ``lax.conv_general_dilated`` (the signature Flax's nn.Conv calls) with custom gradients.

  ``stride1_grads``: stride-1 convolutions take forward-convolution gradients
  (``_conv_s1``), those of one-channel images are a matmul (``_one_channel_conv``);
  otherwise, and for strided ones always, im2col gradients (``_conv``).
  Anything but undilated, ungrouped NHWC/HWIO convolutions with explicit padding
  falls back to the plain convolution and XLA's gradients.
  """
  def conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
           dimension_numbers=None, feature_group_count=1, precision=None, **kw):
    if not plain(lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count, padding, kw):
      return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                      dimension_numbers, feature_group_count, precision=precision, **kw)
    strides, padding = tuple(window_strides), tuple(tuple(p) for p in padding)
    if stride1_grads and strides == (1, 1):
      return _one_channel_conv(lhs, rhs, padding) if rhs.shape[2] == 1 else _conv_s1(lhs, rhs, padding)
    return _conv(lhs, rhs, strides, padding)
  return conv


matmul_grad_conv = _custom_grad_conv(stride1_grads=False)
conv_grad_conv = _custom_grad_conv(stride1_grads=True)


def conv_for_backend(choice: str):
  """The conv function for nn.Conv for a resolved ``model.conv_backward`` (None: XLA's own).

  ``auto`` is resolved per net and backend by ``cpu_kernels.resolve``, the one place that knows it.
  """
  funcs = {"matmul": matmul_grad_conv, "conv": conv_grad_conv, "xla": None}
  if choice not in funcs:
    raise ValueError(f"unknown model.conv_backward {choice!r} here; expected matmul, conv or xla "
                     "(cpu_kernels.resolve turns auto into one of them)")
  return funcs[choice]
