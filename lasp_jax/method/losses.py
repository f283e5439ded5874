"""Contrastive losses of Co2L and LASP: asymmetric SupCon, IRD and selective IRD.

All functions take embeddings of both views stacked view-major (row ``v * B + n``
is view ``v`` of sample ``n``) and a per-sample ``valid`` mask so that padded rows of
the last short batch of an epoch change neither the numerator nor the denominators.
The scale conventions follow the published code (see ``docs/protocol.md``
sections 2, 3 and 5), because the published hyperparameters were tuned for them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lasp_jax.platform.numerics import full_precision, l2_normalize  # noqa: F401  (re-exported: lj.l2_normalize)

_NEG = -1e30  # Finite stand-in for -inf: keeps 0 * logit finite in masked sums.


def _views(per_sample: jax.Array, num_views: int = 2) -> jax.Array:
  """Repeats a per-sample array for every view, view-major."""
  return jnp.tile(per_sample, (num_views,) + (1,) * (per_sample.ndim - 1))


def _masked_log_softmax(logits: jax.Array, mask: jax.Array) -> jax.Array:
  """Row log-softmax over the entries where ``mask`` is true (others -> _NEG)."""
  logits = jnp.where(mask, logits, _NEG)
  return logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)


def _pair_mask(valid_rows: jax.Array) -> jax.Array:
  """Pairs (a, k) with k != a and both rows valid."""
  n = valid_rows.shape[0]
  return (valid_rows[:, None] & valid_rows[None, :]) & ~jnp.eye(n, dtype=bool)


@full_precision
def supcon_loss(
    *,
    features: jax.Array,
    labels: jax.Array,
    is_current: jax.Array,
    valid: jax.Array | None = None,
    temperature: float,
    base_temperature: float = 0.07,
    reduction: str = "mean",
) -> jax.Array:
  """Asymmetric supervised contrastive loss of Co2L (protocol section 2).

  Args:
    features: (2B, D) embeddings, view-major.
    labels: (B,) int labels; both views share them.
    is_current: (B,) bool, true for samples of the current task. Only their
      anchors contribute; the others act as negatives only.
    valid: (B,) bool, false for padding rows. Defaults to all valid.
    temperature: tau of the logits.
    base_temperature: fixed 0.07 in the published code (it does not follow tau).
    reduction: "mean" (over all valid anchors, past-class anchors counting as
      zeros) or "none" (per sample, mean of its two views' masked values).

  Returns:
    The scalar loss, or (B,) values for ``reduction="none"``.
  """
  batch = labels.shape[0]
  num_views = features.shape[0] // batch
  valid = jnp.ones((batch,), bool) if valid is None else valid.astype(bool)
  valid_rows = _views(valid, num_views)
  row_labels = _views(labels, num_views)
  logits = (features @ features.T) / temperature
  others = _pair_mask(valid_rows)
  log_prob = _masked_log_softmax(logits, others)
  positives = others & (row_labels[:, None] == row_labels[None, :])
  num_pos = jnp.sum(positives, axis=1)
  mean_log_prob_pos = jnp.sum(jnp.where(positives, log_prob, 0.0), axis=1) / jnp.maximum(num_pos, 1)
  per_anchor = -(temperature / base_temperature) * mean_log_prob_pos
  weight = (_views(is_current.astype(bool), num_views) & valid_rows).astype(per_anchor.dtype)
  masked = weight * per_anchor
  if reduction == "none":
    return masked.reshape(num_views, batch).mean(axis=0)
  return jnp.sum(masked) / jnp.maximum(jnp.sum(valid_rows), 1)


@full_precision
def relation_probs(z: jax.Array, temperature: float, valid_rows: jax.Array | None = None) -> jax.Array:
  """Row softmax of ``z z^T / temperature`` without the diagonal (zero there)."""
  n = z.shape[0]
  valid_rows = jnp.ones((n,), bool) if valid_rows is None else valid_rows
  mask = _pair_mask(valid_rows)
  return jnp.where(mask, jnp.exp(_masked_log_softmax(z @ z.T / temperature, mask)), 0.0)


@full_precision
def ird_loss(
    *,
    z_cur: jax.Array,
    z_past: jax.Array,
    temp_cur: float,
    temp_past: float,
    valid: jax.Array | None = None,
) -> jax.Array:
  """Instance-wise relation distillation (protocol section 3).

  Row-averaged cross-entropy between the past model's and the current model's
  relation distributions; the diagonal is left out and ``z_past`` gets no gradient.

  Args:
    z_cur: (2B, D) embeddings of the model being trained.
    z_past: (2B, D) embeddings of the frozen past model.
    temp_cur: eta_1, the current model's temperature.
    temp_past: eta_2, the past model's temperature.
    valid: (B,) per-sample validity, repeated for every view; or (2B,) per row.

  Returns:
    Scalar loss.
  """
  n = z_cur.shape[0]
  if valid is None:
    valid_rows = jnp.ones((n,), bool)
  else:
    valid_rows = valid.astype(bool)
    if valid_rows.shape[0] != n:
      valid_rows = _views(valid_rows, n // valid_rows.shape[0])
  mask = _pair_mask(valid_rows)
  p_past = relation_probs(jax.lax.stop_gradient(z_past), temp_past, valid_rows)
  log_p_cur = _masked_log_softmax(z_cur @ z_cur.T / temp_cur, mask)
  per_row = -jnp.sum(jnp.where(mask, p_past * log_p_cur, 0.0), axis=1)
  return jnp.sum(jnp.where(valid_rows, per_row, 0.0)) / jnp.maximum(jnp.sum(valid_rows), 1)


def effective_dim_mask(dim_mask: jax.Array) -> jax.Array:
  """The mask SD really uses: all dims when fewer than two are selected.

  Selective IRD is defined only for more than one selected dim; with 0 or 1 the
  published code (and the paper's intent) falls back to the full IRD.
  """
  dim_mask = dim_mask.astype(bool)
  return jnp.where(jnp.sum(dim_mask) > 1, dim_mask, jnp.ones_like(dim_mask))


def select_dims(z: jax.Array, dim_mask: jax.Array) -> jax.Array:
  """Renormalized embedding restricted to the selected dims, in full width.

  Zeroing the unselected columns leaves every dot product and norm equal to
  those of the column-sliced subset, so shapes stay fixed for any mask.
  """
  return l2_normalize(z * dim_mask.astype(z.dtype))


@full_precision
def selective_ird_loss(
    *,
    z_cur: jax.Array,
    z_past: jax.Array,
    dim_mask: jax.Array,
    temp_cur: float,
    temp_past: float,
    valid: jax.Array | None = None,
) -> jax.Array:
  """Selective distillation (protocol section 5): IRD on a renormalized dim subset.

  Args:
    z_cur, z_past, temp_cur, temp_past, valid: as in :func:`ird_loss`.
    dim_mask: (D,) bool salient subset. With fewer than two dims set, the full
      IRD on the unmodified embeddings is returned.

  Returns:
    Scalar loss.
  """
  active = jnp.sum(dim_mask.astype(bool)) > 1
  m = effective_dim_mask(dim_mask)
  # Full IRD uses the embeddings as they are (R-MNIST's are not unit-norm), so
  # the renormalization applies only when SD is really active.
  a = jnp.where(active, select_dims(z_cur, m), z_cur)
  b = jnp.where(active, select_dims(z_past, m), z_past)
  return ird_loss(z_cur=a, z_past=b, temp_cur=temp_cur, temp_past=temp_past, valid=valid)
