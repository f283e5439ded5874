"""Golden and invariant tests for SupCon, IRD and selective IRD."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.method import losses
from tests.conftest import golden_params, randn

F32 = np.float32


def _once(fn, *args):
  """``fn(*args)`` as one compiled program, as runs call the losses (inside the train step). Op by op, this
  module's ~380 eager ops compiled a program each (~60 ms apiece on the 2-core EPYC, 22 s in all). The data
  are arguments, not constants of ``fn``: each golden seed file then runs the same program."""
  return jax.jit(fn)(*args)


@golden_params("supcon")
@pytest.mark.parametrize("suffix", ["t0p5", "t0p1"])
def test_supcon_golden(golden, suffix):
  g = golden
  tau = float(g[f"temperature_{suffix}"])
  z = jnp.asarray(g["z"].reshape(-1, g["z"].shape[-1]), F32)
  labels = jnp.asarray(g["labels"])
  is_current = jnp.isin(labels, jnp.asarray(g["target_labels"]))
  np.testing.assert_array_equal(np.tile(np.asarray(is_current), (2, 1)), g["anchor_is_current"])
  supcon = functools.partial(losses.supcon_loss, temperature=tau, base_temperature=float(g["base_temperature"]))

  def both(z, labels, is_current):
    mean = jax.value_and_grad(lambda z: supcon(features=z, labels=labels, is_current=is_current))(z)
    return mean, supcon(features=z, labels=labels, is_current=is_current, reduction="none")
  (loss, grad), none = _once(both, z, labels, is_current)
  np.testing.assert_allclose(loss, g[f"loss_{suffix}"], rtol=1e-5)
  np.testing.assert_allclose(grad.reshape(g["z"].shape), g[f"grad_z_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(none, g[f"loss_none_{suffix}"], rtol=1e-5, atol=1e-7)


@golden_params("ird")
@pytest.mark.parametrize("suffix", ["c0p2_p0p01", "c0p1_p0p1"])
def test_ird_golden(golden, suffix):
  g = golden
  t_cur, t_past = [float(v.replace("p", ".")) for v in suffix[1:].split("_p")]
  z_cur, z_past = jnp.asarray(g["z_cur"], F32), jnp.asarray(g["z_past"], F32)
  ird = functools.partial(losses.ird_loss, temp_cur=t_cur, temp_past=t_past)
  (loss, grad), p_cur, p_past = _once(
      lambda z, zp: (jax.value_and_grad(lambda z: ird(z_cur=z, z_past=zp))(z), losses.relation_probs(z, t_cur),
                     losses.relation_probs(zp, t_past)), z_cur, z_past)
  np.testing.assert_allclose(loss, g[f"loss_{suffix}"], rtol=1e-5)
  np.testing.assert_allclose(grad, g[f"grad_z_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(p_cur, g[f"p_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(p_past, g[f"p_past_{suffix}"], atol=1e-5, rtol=1e-4)


@golden_params("sd")
@pytest.mark.parametrize("suffix", ["c0p2_p0p01", "c0p1_p0p1"])
def test_selective_ird_golden(golden, suffix):
  g = golden
  t_cur, t_past = [float(v.replace("p", ".")) for v in suffix[1:].split("_p")]
  z_cur, z_past = jnp.asarray(g["z_cur"], F32), jnp.asarray(g["z_past"], F32)
  mask = jnp.asarray(g["mask"])
  temps = dict(temp_cur=t_cur, temp_past=t_past)

  def everything(z, zp, mask):
    a, b = losses.select_dims(z, mask), losses.select_dims(zp, mask)
    sd = jax.value_and_grad(lambda z: losses.selective_ird_loss(z_cur=z, z_past=zp, dim_mask=mask, **temps))(z)
    return (sd, losses.ird_loss(z_cur=z, z_past=zp, **temps), a, b, losses.relation_probs(a, t_cur),
            losses.relation_probs(b, t_past))
  (loss, grad), full, a, b, p_cur, p_past = _once(everything, z_cur, z_past, mask)
  np.testing.assert_allclose(loss, g[f"loss_sd_{suffix}"], rtol=1e-5)
  np.testing.assert_allclose(grad, g[f"grad_z_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(full, g[f"loss_full_{suffix}"], rtol=1e-5)
  sel = np.asarray(g["mask"], bool)
  np.testing.assert_allclose(np.asarray(a)[:, sel], g["z_cur_selected"], atol=1e-6)
  np.testing.assert_allclose(np.asarray(b)[:, sel], g["z_past_selected"], atol=1e-6)
  np.testing.assert_allclose(p_cur, g[f"p_cur_{suffix}"], atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(p_past, g[f"p_past_{suffix}"], atol=1e-5, rtol=1e-4)


@golden_params("sd")
def test_selective_ird_single_dim_falls_back(golden):
  g = golden
  z_cur, z_past = jnp.asarray(g["z_cur"], F32), jnp.asarray(g["z_past"], F32)
  sd = jax.jit(functools.partial(losses.selective_ird_loss, temp_cur=0.2, temp_past=0.01))
  single = sd(z_cur=z_cur, z_past=z_past, dim_mask=jnp.asarray(g["mask_single"]))
  np.testing.assert_allclose(single, g["loss_single_c0p2_p0p01"], rtol=1e-5)
  empty = sd(z_cur=z_cur, z_past=z_past, dim_mask=jnp.zeros(16, bool))
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

  def padded_and_plain(z, zp, labels):
    valid = jnp.arange(b + extra) < b
    cur = labels < 2
    drop = functools.partial(_drop_padding, b=b, extra=extra)
    supcon = functools.partial(losses.supcon_loss, temperature=0.5)
    ird = functools.partial(losses.ird_loss, temp_cur=0.2, temp_past=0.01)
    return (supcon(features=z, labels=labels, is_current=cur, valid=valid),
            supcon(features=drop(z), labels=labels[:b], is_current=cur[:b]),
            ird(z_cur=z, z_past=zp, valid=valid), ird(z_cur=drop(z), z_past=drop(zp)))
  s_padded, s_plain, i_padded, i_plain = _once(padded_and_plain, *_random_batch(0, b, extra=extra))
  np.testing.assert_allclose(s_padded, s_plain, rtol=1e-6)
  np.testing.assert_allclose(i_padded, i_plain, rtol=1e-6)


def test_no_nan_without_positives_and_sd_all_dims_equals_ird():
  z, zp, _ = _random_batch(1)
  labels = np.arange(9)  # Only the other view is a positive; drop it with padding.
  valid = np.arange(9) == 0
  supcon = lambda z: losses.supcon_loss(features=z, labels=labels, is_current=valid, valid=valid, temperature=0.1)
  ird = functools.partial(losses.ird_loss, temp_cur=0.2, temp_past=0.01)
  every_dim = functools.partial(losses.selective_ird_loss, dim_mask=np.ones(8, bool), temp_cur=0.2, temp_past=0.01)
  g, full, sd = _once(lambda z, zp: (jax.grad(supcon)(z), ird(z_cur=z, z_past=zp), every_dim(z_cur=z, z_past=zp)),
                      z, zp)
  assert np.all(np.isfinite(g))
  np.testing.assert_allclose(sd, full, rtol=1e-6)
