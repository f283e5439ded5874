"""Two-view SupCon augmentation in JAX: jitted, vmapped, per-sample randomness.

Mirrors the torchvision pipelines of the published code (protocol section 1.1):
RandomResizedCrop -> horizontal flip -> ColorJitter (random order, p) ->
grayscale (p) -> Gaussian blur (p, Tiny-ImageNet) -> normalize; Rotated MNIST is
a fixed task rotation (nearest, as PIL) then RandomResizedCrop. Images are float
[0, 1] HWC inside; PIL's intermediate uint8 rounding is not reproduced.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

GRAY = np.array([0.299, 0.587, 0.114])  # numpy: a jnp constant here would start a JAX backend at import


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
  """Static description of one dataset's augmentation (hashable for jit)."""
  size: int
  crop_scale: Tuple[float, float] = (0.2, 1.0)
  crop_ratio: Tuple[float, float] = (3 / 4, 4 / 3)
  flip: bool = True
  jitter_p: float = 0.8
  jitter: Tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
  grayscale_p: float = 0.2
  blur_p: float = 0.0
  blur_kernel: int = 7
  blur_sigma: Tuple[float, float] = (0.1, 2.0)
  rotate: bool = False
  mean: Optional[Tuple[float, ...]] = None
  std: Optional[Tuple[float, ...]] = None


# ----------------------------------------------------------------------------- geometry

def rrc_params(u, height: int, width: int, scale, ratio, attempts: int = 10):
  """torchvision RandomResizedCrop.get_params from 2 * attempts + 2 uniforms in [0, 1).

  Ten candidate boxes are drawn at once and the first that fits is used; if
  none fits, the centre crop with the ratio clamped, as torchvision does.
  Returns (top, left, h, w) as int32.
  """
  area = height * width * (scale[0] + (scale[1] - scale[0]) * u[:attempts])
  lo, hi = math.log(ratio[0]), math.log(ratio[1])
  aspect = jnp.exp(lo + (hi - lo) * u[attempts:2 * attempts])
  w = jnp.round(jnp.sqrt(area * aspect)).astype(jnp.int32)
  h = jnp.round(jnp.sqrt(area / aspect)).astype(jnp.int32)
  ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
  first = jnp.argmax(ok)
  in_ratio = width / height
  if in_ratio < ratio[0]:
    fw, fh = width, int(round(width / ratio[0]))
  elif in_ratio > ratio[1]:
    fw, fh = int(round(height * ratio[1])), height
  else:
    fw, fh = width, height
  found = jnp.any(ok)
  h = jnp.where(found, h[first], fh)
  w = jnp.where(found, w[first], fw)
  top = jnp.where(found, _randint(u[2 * attempts], height - h + 1), (height - fh) // 2)
  left = jnp.where(found, _randint(u[2 * attempts + 1], width - w + 1), (width - fw) // 2)
  return top, left, h, w


def _randint(u, n):
  """An integer uniform in [0, n) from a uniform u in [0, 1)."""
  return jnp.minimum((u * n).astype(jnp.int32), n - 1)


def _upsample_weights(start, length, in_size: int, out_size: int):
  """(out, in) bilinear weights sampling [start, start+length) at out_size points.

  Triangle kernel at half-pixel centres, renormalized at the borders: PIL's
  bilinear resize whenever length <= out_size (no antialiasing needed).
  """
  src = start + (jnp.arange(out_size) + 0.5) * (length / out_size) - 0.5
  w = jnp.maximum(0.0, 1.0 - jnp.abs(src[:, None] - jnp.arange(in_size)[None, :]))
  return w / jnp.sum(w, axis=1, keepdims=True)


def resized_crop(img, top, left, h, w, size: int):
  """Bilinear resize of the box [top, top+h) x [left, left+w) to size x size (as PIL).

  When ``size`` is at least the image size every crop is upsampled, and two small
  weight matrices do it (cheap to compile). Otherwise jax.image's antialiased
  resize is used, matching PIL's downsampling filter.
  """
  if size >= max(img.shape[0], img.shape[1]):
    f = lambda v: v.astype(jnp.float32)
    wy = _upsample_weights(f(top), f(h), img.shape[0], size)
    wx = _upsample_weights(f(left), f(w), img.shape[1], size)
    return jnp.einsum("oh,hwc,pw->opc", wy, img, wx)
  sy, sx = size / h.astype(jnp.float32), size / w.astype(jnp.float32)
  return jax.image.scale_and_translate(
      img, (size, size, img.shape[-1]), (0, 1), jnp.stack([sy, sx]),
      jnp.stack([-top * sy, -left * sx]), method="linear", antialias=True)


def rotate(img, angle_deg):
  """PIL ``Image.rotate(angle)`` (counter-clockwise, nearest, fill 0, same size)."""
  h, w = img.shape[:2]
  phi = -jnp.deg2rad(angle_deg)
  c, s = jnp.cos(phi), jnp.sin(phi)
  y, x = jnp.meshgrid(jnp.arange(h) + 0.5 - h / 2, jnp.arange(w) + 0.5 - w / 2, indexing="ij")
  src_x = jnp.floor(c * x + s * y + w / 2).astype(jnp.int32)
  src_y = jnp.floor(-s * x + c * y + h / 2).astype(jnp.int32)
  inside = (src_x >= 0) & (src_x < w) & (src_y >= 0) & (src_y < h)
  out = img[jnp.clip(src_y, 0, h - 1), jnp.clip(src_x, 0, w - 1)]
  return jnp.where(inside[..., None], out, 0)


# ----------------------------------------------------------------------------- colour

def grayscale(img):
  return jnp.broadcast_to((img @ GRAY)[..., None], img.shape)


def adjust_brightness(img, f):
  return jnp.clip(img * f, 0, 1)


def adjust_contrast(img, f):
  return jnp.clip(f * img + (1 - f) * jnp.mean(img @ GRAY), 0, 1)


def adjust_saturation(img, f):
  return jnp.clip(f * img + (1 - f) * grayscale(img), 0, 1)


def rgb_to_hsv(img):
  r, g, b = img[..., 0], img[..., 1], img[..., 2]
  maxc, minc = jnp.max(img, -1), jnp.min(img, -1)
  v, delta = maxc, maxc - minc
  s = jnp.where(maxc > 0, delta / jnp.where(maxc > 0, maxc, 1), 0)
  d = jnp.where(delta > 0, delta, 1)
  rc, gc, bc = (maxc - r) / d, (maxc - g) / d, (maxc - b) / d
  h = jnp.where(maxc == r, bc - gc, jnp.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
  h = jnp.where(delta > 0, (h / 6.0) % 1.0, 0.0)
  return jnp.stack([h, s, v], -1)


def hsv_to_rgb(hsv):
  h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
  i = jnp.floor(h * 6.0)
  f = h * 6.0 - i
  p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
  i = i.astype(jnp.int32) % 6
  choices = [jnp.stack(c, -1) for c in ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))]
  return jnp.select([(i == k)[..., None] for k in range(6)], choices)


def adjust_hue(img, shift):
  hsv = rgb_to_hsv(img)
  return hsv_to_rgb(hsv.at[..., 0].set((hsv[..., 0] + shift) % 1.0))


def color_jitter(u, img, strength):
  """torchvision ColorJitter from 8 uniforms: the four adjustments in a random order."""
  b, c, s, h = strength
  span = lambda v, lo, hi: lo + (hi - lo) * v
  fb, fc = span(u[0], max(0.0, 1 - b), 1 + b), span(u[1], max(0.0, 1 - c), 1 + c)
  fs = span(u[2], max(0.0, 1 - s), 1 + s)
  fh = span(u[3], -h, h)
  ops = [lambda x: adjust_brightness(x, fb), lambda x: adjust_contrast(x, fc),
         lambda x: adjust_saturation(x, fs), lambda x: adjust_hue(x, fh)]
  for i in jnp.argsort(u[4:8]):  # a uniformly random permutation
    img = jax.lax.switch(i, ops, img)
  return img


# ----------------------------------------------------------------------------- blur

def gaussian_kernel1d(size: int, sigma):
  x = jnp.arange(size) - (size - 1) / 2
  k = jnp.exp(-0.5 * jnp.square(x / sigma))
  return k / jnp.sum(k)


def gaussian_blur(img, sigma, size: int = 7):
  """Separable Gaussian blur with reflect padding (torchvision GaussianBlur)."""
  k = gaussian_kernel1d(size, sigma)
  r = size // 2
  x = jnp.pad(img, ((r, r), (r, r), (0, 0)), mode="reflect")
  h, w = img.shape[:2]
  x = sum(k[i] * x[i:i + h] for i in range(size))
  return sum(k[i] * x[:, i:i + w] for i in range(size))


# ----------------------------------------------------------------------------- pipelines

def normalize(img, cfg: AugmentConfig):
  if cfg.mean is None:
    return img
  return (img - jnp.asarray(cfg.mean)) / jnp.asarray(cfg.std)


def to_float(images_u8):
  return images_u8.astype(jnp.float32) / 255.0


# All randomness of one view comes from one row of uniforms: one PRNG call per
# batch instead of a dozen per sample keeps the compiled step small (the threefry
# hash is expanded at every call site; 5 s of XLA:CPU compile time otherwise).
_RRC, _FLIP, _JIT_P, _JIT, _GRAY, _BLUR_S, _BLUR_P = 0, 22, 23, 24, 32, 33, 34
NUM_UNIFORMS = 35


def augment_one(u, img, angle, cfg: AugmentConfig):
  """One random view of one float image, from ``NUM_UNIFORMS`` uniforms ``u``."""
  if cfg.rotate:
    img = rotate(img, angle)
  top, left, h, w = rrc_params(u[_RRC:_FLIP], img.shape[0], img.shape[1], cfg.crop_scale, cfg.crop_ratio)
  img = resized_crop(img, top, left, h, w, cfg.size)
  if cfg.flip:
    img = jnp.where(u[_FLIP] < 0.5, img[:, ::-1], img)
  if cfg.jitter_p > 0 and img.shape[-1] == 3:
    img = jnp.where(u[_JIT_P] < cfg.jitter_p, color_jitter(u[_JIT:_GRAY], img, cfg.jitter), img)
  if cfg.grayscale_p > 0 and img.shape[-1] == 3:
    img = jnp.where(u[_GRAY] < cfg.grayscale_p, grayscale(img), img)
  if cfg.blur_p > 0:
    sigma = cfg.blur_sigma[0] + (cfg.blur_sigma[1] - cfg.blur_sigma[0]) * u[_BLUR_S]
    img = jnp.where(u[_BLUR_P] < cfg.blur_p, gaussian_blur(img, sigma, cfg.blur_kernel), img)
  return normalize(img, cfg)


def _views(key, images_u8, angles, cfg: AugmentConfig, num_views: int, rows: int = 0):
  b = images_u8.shape[0]
  u = jax.random.uniform(key, (num_views, max(b, rows), NUM_UNIFORMS))
  if rows > b:  # a batch's first b rows: each row's uniforms whatever rows past b the batch holds
    u = u[:, :b]
  imgs = to_float(images_u8)
  one = jax.vmap(lambda uu, x, a: augment_one(uu, x, a, cfg))
  return jnp.concatenate([one(u[v], imgs, angles) for v in range(num_views)])


def two_views(key, images_u8, angles, cfg: AugmentConfig, rows: int = 0):
  """(2B, S, S, C) float views, view-major, of a uint8 batch (B, H, W, C); ``rows`` > B: the uniforms
  drawn for a batch of ``rows``, its first B used (a short step augments as its padded self would)."""
  return _views(key, images_u8, angles, cfg, 2, rows)


def one_view(key, images_u8, angles, cfg: AugmentConfig):
  """(B, S, S, C): a single random view per image (linear-probe training)."""
  return _views(key, images_u8, angles, cfg, 1)


def test_transform(images_u8, angles, cfg: AugmentConfig):
  """Evaluation preprocessing: task rotation (if any), scaling, normalization."""
  imgs = to_float(images_u8)
  if cfg.rotate:
    imgs = jax.vmap(rotate)(imgs, angles)
  return normalize(imgs, cfg)
