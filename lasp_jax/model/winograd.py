"""3x3 stride-1 convolutions as Winograd F(m x m, 3 x 3): fewer multiplications, as batched matmuls.

A 3x3 convolution of an (m + 2)-square input tile to its m x m outputs is, in the Winograd basis
(Lavin and Gray, 2016), an element-wise product of the transformed tile ``B^T d B`` and the transformed
kernel ``G g G^T``, then ``A^T (.) A``: per output pixel and channel pair (m + 2)^2 / m^2 multiplications
instead of 9 (F(2x2): 4, 2.25x fewer; F(4x4): 2.25, 4x fewer). Over a batch, the element-wise products are
(m + 2)^2 matmuls, (tiles, C) @ (C, K), which XLA:CPU runs near its matmul rate, and the transforms are sums
of strided slices that it fuses into loops. The gradients are JAX's own of this program: the transposed
transforms around two more sets of batched matmuls, so both gradients take the same reduced arithmetic.

``model.winograd`` (0 = off, 2 or 4) routes a net's 3x3 stride-1 convolutions with padding 1 and at least
``MIN_CHANNELS`` input channels here; every other convolution keeps the conv function it had. The result
differs from the direct convolution by rounding only; F(4x4)'s transforms (coefficients up to 8 and 1/24)
round more than F(2x2)'s (tests/test_winograd.py measures both). Under bfloat16 the transforms run in float32.
Off by default: on a 2-core AMD EPYC Zen 3 ResNet-18's train step is slower with either (BENCHMARKS.md, "Tried"):
the transforms, as XLA:CPU fuses them, cost more than the multiplications saved.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from lasp_jax.model.conv import plain

# (B^T, G, A^T) of F(m, 3), for correlation (lax.conv's convention: no kernel flip). F(4, 3) on the
# points 0, +-1, +-2 and infinity.
TRANSFORMS = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                 np.float64)),
}
# Below this many input channels a tile's matmul is too thin to pay for the transforms (ResNet's stem: 3).
MIN_CHANNELS = 16


def _combine(parts, coefs):
  """sum(coef * part) over the nonzero coefficients: one fused loop, no matmul over a tiny axis."""
  out = None
  for c, p in zip(coefs, parts):
    if c != 0:
      term = p if c == 1 else -p if c == -1 else p * float(c)
      out = term if out is None else out + term
  return out


def conv3x3(x, k, m: int = 4):
  """NHWC/HWIO 3x3 correlation, stride 1, zero padding 1 (``SAME``), by Winograd F(m x m, 3 x 3).

  Any height and width: the tiles cover the image padded up to a multiple of m, and the extra rows and
  columns are cropped from the output.
  """
  bt, g, at = TRANSFORMS[m]
  dtype = x.dtype
  if jnp.finfo(dtype).bits < 32:
    x, k = x.astype(jnp.float32), k.astype(jnp.float32)
  n, h, w, _ = x.shape
  alpha, th, tw = m + 2, -(-h // m), -(-w // m)
  xp = jnp.pad(x, ((0, 0), (1, 1 + th * m - h), (1, 1 + tw * m - w), (0, 0)))
  # Input transform, rows then columns: tile (ty, tx)'s row i is padded row m * ty + i.
  rows = [xp[:, i:i + m * (th - 1) + 1:m] for i in range(alpha)]
  rows = [_combine(rows, bt[a]) for a in range(alpha)]
  v = jnp.stack([_combine([r[:, :, j:j + m * (tw - 1) + 1:m] for j in range(alpha)], bt[b])
                 for r in rows for b in range(alpha)])                            # (alpha^2, n, th, tw, C)
  u = jnp.einsum("ai,ijck,bj->abck", g.astype(x.dtype), k, g.astype(x.dtype))
  prod = lax.dot_general(v.reshape(alpha * alpha, -1, v.shape[-1]), u.reshape(alpha * alpha, *k.shape[2:]),
                         (((2,), (1,)), ((0,), (0,))))                            # (alpha^2, tiles, K)
  prod = prod.reshape(alpha, alpha, n, th, tw, -1)
  # Output transform, columns then rows, into (n, th, m, tw, m, K).
  cols = [[_combine([prod[a, b] for b in range(alpha)], at[q]) for q in range(m)] for a in range(alpha)]
  y = jnp.stack([jnp.stack([_combine([cols[a][q] for a in range(alpha)], at[p]) for q in range(m)], axis=3)
                 for p in range(m)], axis=2)
  return y.reshape(n, th * m, tw * m, -1)[:, :h, :w].astype(dtype)


def winograd_conv(m: int, fallback=None):
  """A drop-in for ``lax.conv_general_dilated`` (nn.Conv's ``conv_general_dilated``): Winograd F(m x m, 3 x 3)
  for the 3x3 stride-1 padding-1 NHWC/HWIO convolutions of at least ``MIN_CHANNELS`` input channels, ``fallback``
  (default: XLA's convolution) for every other."""
  other = fallback or lax.conv_general_dilated

  def conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
           feature_group_count=1, precision=None, **kw):
    if (plain(lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count, padding, kw)
        and rhs.shape[:2] == (3, 3) and tuple(window_strides) == (1, 1) and rhs.shape[2] >= MIN_CHANNELS
        and tuple(tuple(p) for p in padding) == ((1, 1), (1, 1))):
      return conv3x3(lhs, rhs, m)
    return other(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
                 feature_group_count, precision=precision, **kw)
  return conv
