"""Golden and invariant tests for SupCon, IRD and selective IRD."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax import losses
from tests.conftest import golden_params, randn

F32 = np.float32


@golden_params("supcon")
@pytest.mark.parametrize("suffix", ["t0p5", "t0p1"])
def test_supcon_golden(golden, suffix):
  g = golden
  tau = float(g[f"temperature_{suffix}"])
  z = jnp.asarray(g["z"].reshape(-1, g["z"].shape[-1]), F32)
  labels = jnp.asarray(g["labels"])
  is_current = jnp.isin(labels, jnp.asarray(g["target_labels"]))
  np.testing.assert_array_equal(np.tile(np.asarray(is_current), (2, 1)), g["anchor_is_current"])
  fn = lambda z: losses.supcon_loss(features=z, labels=labels, is_current=is_current,
                                    temperature=tau, base_temperature=float(g["base_temperature"]))
  loss, grad = jax.value_and_grad(fn)(z)
  np.testing.assert_allclose(loss, g[f"loss_{suffix}"], rtol=1e-5)
  np.testing.assert_allclose(grad.reshape(g["z"].shape), g[f"grad_z_{suffix}"], atol=1e-5, rtol=1e-4)
  none = losses.supcon_loss(features=z, labels=labels, is_current=is_current, temperature=tau,
                            reduction="none")
  np.testing.assert_allclose(none, g[f"loss_none_{suffix}"], rtol=1e-5, atol=1e-7)


@golden_params("ird")
@pytest.mark.parametrize("suffix", ["c0p2_p0p01", "c0p1_p0p1"])
def test_ird_golden(golden, suffix):
  g = golden
  t_cur, t_past = [float(v.replace("p", ".")) for v in suffix[1:].split("_p")]
  z_cur, z_past = jnp.asarray(g["z_cur"], F32), jnp.asarray(g["z_past"], F32)
  fn = lambda z: losses.ird_loss(z_cur=z, z_past=z_past, temp_cur=t_cur, temp_past=t_past)
  loss, grad = jax.value_and_grad(fn)(z_cur)
  np.testing.assert_allclose(loss, g[f"loss_{suffix}"], rtol=1e-5)
  np.testing.assert_allclose(grad, g[f"grad_z_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(losses.relation_probs(z_cur, t_cur), g[f"p_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(losses.relation_probs(z_past, t_past), g[f"p_past_{suffix}"], atol=1e-5, rtol=1e-4)


@golden_params("sd")
@pytest.mark.parametrize("suffix", ["c0p2_p0p01", "c0p1_p0p1"])
def test_selective_ird_golden(golden, suffix):
  g = golden
  t_cur, t_past = [float(v.replace("p", ".")) for v in suffix[1:].split("_p")]
  z_cur, z_past = jnp.asarray(g["z_cur"], F32), jnp.asarray(g["z_past"], F32)
  mask = jnp.asarray(g["mask"])
  fn = lambda z: losses.selective_ird_loss(z_cur=z, z_past=z_past, dim_mask=mask, temp_cur=t_cur,
                                           temp_past=t_past)
  loss, grad = jax.value_and_grad(fn)(z_cur)
  np.testing.assert_allclose(loss, g[f"loss_sd_{suffix}"], rtol=1e-5)
  np.testing.assert_allclose(grad, g[f"grad_z_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  full = losses.ird_loss(z_cur=z_cur, z_past=z_past, temp_cur=t_cur, temp_past=t_past)
  np.testing.assert_allclose(full, g[f"loss_full_{suffix}"], rtol=1e-5)
  sel = np.asarray(g["mask"], bool)
  np.testing.assert_allclose(losses.select_dims(z_cur, mask)[:, sel], g["z_cur_selected"], atol=1e-6)
  np.testing.assert_allclose(losses.select_dims(z_past, mask)[:, sel], g["z_past_selected"], atol=1e-6)
  a, b = losses.select_dims(z_cur, mask), losses.select_dims(z_past, mask)
  np.testing.assert_allclose(losses.relation_probs(a, t_cur), g[f"p_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(losses.relation_probs(b, t_past), g[f"p_past_{suffix}"], atol=1e-5, rtol=1e-4)


@golden_params("sd")
def test_selective_ird_single_dim_falls_back(golden):
  g = golden
  z_cur, z_past = jnp.asarray(g["z_cur"], F32), jnp.asarray(g["z_past"], F32)
  single = losses.selective_ird_loss(z_cur=z_cur, z_past=z_past, dim_mask=jnp.asarray(g["mask_single"]),
                                     temp_cur=0.2, temp_past=0.01)
  np.testing.assert_allclose(single, g["loss_single_c0p2_p0p01"], rtol=1e-5)
  empty = losses.selective_ird_loss(z_cur=z_cur, z_past=z_past, dim_mask=jnp.zeros(16, bool),
                                    temp_cur=0.2, temp_past=0.01)
  np.testing.assert_allclose(empty, g["loss_full_c0p2_p0p01"], rtol=1e-5)


def _random_batch(seed, b=6, d=8, extra=3):
  z = losses.l2_normalize(randn(2 * (b + extra), d, seed=2 * seed))
  zp = losses.l2_normalize(randn(2 * (b + extra), d, seed=2 * seed + 1))
  labels = jnp.arange(b + extra) % 3
  return z, zp, labels


def _drop_padding(x, b, extra):
  return jnp.concatenate([x[:b], x[b + extra:2 * b + extra]])


def test_padding_rows_are_ignored():
  b, extra = 6, 3
  z, zp, labels = _random_batch(0, b, extra=extra)
  valid = jnp.arange(b + extra) < b
  cur = labels < 2
  padded = losses.supcon_loss(features=z, labels=labels, is_current=cur, valid=valid, temperature=0.5)
  plain = losses.supcon_loss(features=_drop_padding(z, b, extra), labels=labels[:b], is_current=cur[:b],
                             temperature=0.5)
  np.testing.assert_allclose(padded, plain, rtol=1e-6)
  padded = losses.ird_loss(z_cur=z, z_past=zp, valid=valid, temp_cur=0.2, temp_past=0.01)
  plain = losses.ird_loss(z_cur=_drop_padding(z, b, extra), z_past=_drop_padding(zp, b, extra),
                          temp_cur=0.2, temp_past=0.01)
  np.testing.assert_allclose(padded, plain, rtol=1e-6)


def test_no_nan_without_positives_and_sd_all_dims_equals_ird():
  z, zp, _ = _random_batch(1)
  labels = jnp.arange(9)  # Only the other view is a positive; drop it with padding.
  valid = jnp.zeros(9, bool).at[0].set(True)
  g = jax.grad(lambda z: losses.supcon_loss(features=z, labels=labels, is_current=valid, valid=valid,
                                            temperature=0.1))(z)
  assert np.all(np.isfinite(g))
  full = losses.ird_loss(z_cur=z, z_past=zp, temp_cur=0.2, temp_past=0.01)
  sd = losses.selective_ird_loss(z_cur=z, z_past=zp, dim_mask=jnp.ones(8, bool), temp_cur=0.2, temp_past=0.01)
  np.testing.assert_allclose(sd, full, rtol=1e-6)
