"""Each augmentation against an independent reference (PIL / numpy / colorsys)."""

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image, ImageEnhance

from lasp_jax.data import augment as A
from tests.conftest import rand

RNG = np.random.default_rng(0)
IMG = RNG.integers(0, 256, (16, 16, 3), dtype=np.uint8)
FIMG = jnp.asarray(IMG / 255.0, jnp.float32)


def _u8(x):
  return np.asarray(x) * 255.0


@pytest.mark.parametrize("box,size", [((3, 5, 20, 22), 32), ((0, 0, 16, 16), 10), ((2, 1, 9, 14), 16)])
def test_resized_crop_matches_pil(box, size):
  left, top, right, bottom = box
  img = RNG.integers(0, 256, (24, 24, 3), dtype=np.uint8)
  ours = A.resized_crop(jnp.asarray(img / 255.0, jnp.float32), jnp.int32(top), jnp.int32(left),
                        jnp.int32(bottom - top), jnp.int32(right - left), size)
  pil = np.asarray(Image.fromarray(img).resize((size, size), Image.BILINEAR, box=box), float)
  assert np.abs(_u8(ours) - pil).max() <= 1.0  # PIL rounds to uint8


@pytest.mark.parametrize("angle", [0.0, 33.3, 90.0, 151.7])
def test_rotate_matches_pil(angle):
  g = RNG.integers(0, 256, (28, 28), dtype=np.uint8)
  ours = np.asarray(A.rotate(jnp.asarray(g[..., None], jnp.float32), angle))[..., 0]
  np.testing.assert_array_equal(ours, np.asarray(Image.fromarray(g).rotate(angle, Image.NEAREST)))


@pytest.mark.parametrize("f", [0.6, 1.3])
def test_brightness_contrast_saturation_match_pil(f):
  pil = Image.fromarray(IMG)
  for ours, enhancer in [(A.adjust_brightness, ImageEnhance.Brightness),
                         (A.adjust_contrast, ImageEnhance.Contrast),
                         (A.adjust_saturation, ImageEnhance.Color)]:
    ref = np.asarray(enhancer(pil).enhance(f), float)
    assert np.abs(_u8(ours(FIMG, f)) - ref).max() <= 2.0, enhancer.__name__


def test_grayscale_matches_pil():
  ref = np.asarray(Image.fromarray(IMG).convert("L"), float)
  ours = _u8(A.grayscale(FIMG))
  assert np.abs(ours[..., 0] - ref).max() <= 1.0
  np.testing.assert_array_equal(ours[..., 0], ours[..., 2])


@pytest.mark.parametrize("shift", [-0.1, 0.03, 0.1])
def test_hue_matches_colorsys(shift):
  ours = np.asarray(A.adjust_hue(FIMG, shift))
  flat = np.asarray(FIMG).reshape(-1, 3)
  ref = []
  for r, g, b in flat:
    h, s, v = colorsys.rgb_to_hsv(r, g, b)
    ref.append(colorsys.hsv_to_rgb((h + shift) % 1.0, s, v))
  np.testing.assert_allclose(ours.reshape(-1, 3), np.array(ref), atol=1e-5)


def test_gaussian_blur_matches_numpy():
  sigma, size = 1.3, 7
  x = np.arange(size) - 3
  k = np.exp(-0.5 * (x / sigma) ** 2)
  k /= k.sum()
  padded = np.pad(np.asarray(FIMG), ((3, 3), (3, 3), (0, 0)), mode="reflect")
  rows = np.apply_along_axis(lambda v: np.convolve(v, k[::-1], mode="valid"), 0, padded)
  ref = np.apply_along_axis(lambda v: np.convolve(v, k[::-1], mode="valid"), 1, rows)
  np.testing.assert_allclose(A.gaussian_blur(FIMG, sigma, size), ref, atol=1e-5)


def test_rrc_parameter_statistics():
  u = rand(4000, 22)
  top, left, h, w = jax.vmap(lambda v: A.rrc_params(v, 32, 32, (0.2, 1.0), (3 / 4, 4 / 3)))(u)
  area = np.asarray(h * w) / 1024
  assert np.all((h >= 1) & (h <= 32) & (w >= 1) & (w <= 32))
  assert np.all((top >= 0) & (top + h <= 32) & (left >= 0) & (left + w <= 32))
  assert 0.15 < area.min() < 0.25 and area.max() <= 1.0
  ratio = np.asarray(w / h)
  assert np.median(ratio) == pytest.approx(1.0, abs=0.1)
  assert 0.5 < np.mean(area) < 0.65  # ~ U(0.2, 1) with rejections near 1


def test_two_views_statistics_and_shapes():
  cfg = A.AugmentConfig(16, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
  imgs = jnp.asarray(RNG.integers(0, 256, (64, 16, 16, 3), dtype=np.uint8))
  views = jax.jit(lambda k: A.two_views(k, imgs, jnp.zeros(64), cfg))(jax.random.PRNGKey(1))
  assert views.shape == (128, 16, 16, 3)
  assert not np.allclose(views[:64], views[64:])  # independent views
  gray = np.asarray(jnp.all(jnp.abs(views[..., 0] - views[..., 1]) < 1e-6, axis=(1, 2)))
  assert 0.08 < gray.mean() < 0.35  # p = 0.2 grayscale
  raw = (np.asarray(imgs, np.float32) / 255.0 - 0.5) / 0.25
  assert np.abs(np.asarray(views).mean() - raw.mean()) < 0.5


def test_normalization_uses_each_channels_mean_and_std():
  """With the whole image as the crop and no colour change, a view is exactly (x / 255 - mean) / std per channel
  (a wrong or swapped mean or std fails)."""
  cfg = A.AugmentConfig(16, crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip=False, jitter_p=0.0, grayscale_p=0.0,
                        mean=(0.1, 0.5, 0.9), std=(0.2, 0.3, 0.4))
  imgs = jnp.asarray(RNG.integers(0, 256, (4, 16, 16, 3), dtype=np.uint8))
  views = np.asarray(jax.jit(lambda k: A.two_views(k, imgs, jnp.zeros(4), cfg))(jax.random.PRNGKey(2)))
  expected = (np.asarray(imgs, np.float32) / 255.0 - np.array([0.1, 0.5, 0.9])) / np.array([0.2, 0.3, 0.4])
  np.testing.assert_allclose(views[:4], expected, atol=1e-4)
  np.testing.assert_allclose(views[4:], expected, atol=1e-4)


def test_flip_probability():
  cfg = A.AugmentConfig(8, crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), jitter_p=0, grayscale_p=0)
  img = jnp.tile(jnp.arange(8, dtype=jnp.uint8)[None, :, None], (8, 1, 1))[None].repeat(400, 0)
  out = jax.jit(lambda k, i, a: A.one_view(k, i, a, cfg))(jax.random.PRNGKey(0), img, jnp.zeros(400))
  flipped = np.asarray(out[:, 0, 0, 0] > out[:, 0, -1, 0])
  assert 0.4 < flipped.mean() < 0.6
  np.testing.assert_allclose(np.where(flipped[:, None], out[:, 0, ::-1, 0], out[:, 0, :, 0])[0] * 255,
                             np.arange(8), atol=1e-3)
