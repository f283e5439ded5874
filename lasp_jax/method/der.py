"""Dark Experience Replay (DER; Buzzega et al., 2020): a reservoir memory keeping each sample's logits as the model
gave them when it entered; the loss is the stream's cross-entropy + alpha x the mean squared error between the
current logits of a draw of remembered samples and their stored ones (mean over the draw's rows and classes)."""

from __future__ import annotations

import jax.numpy as jnp

from lasp_jax.method.classifier import Classifier, cross_entropy, mean


def logit_mse(logits, stored, valid):
  """Mean over the valid rows and every class of (logits - stored)^2 (PyTorch's F.mse_loss on the draw)."""
  w = valid.astype(jnp.float32)[:, None]
  return jnp.sum(w * (logits - stored) ** 2) / jnp.maximum(jnp.sum(w) * logits.shape[-1], 1.0)


class DER(Classifier):
  draws = 1
  keeps_logits = True
  metrics = ("loss", "ce", "logit_mse", "z_norm", "z_var")

  def loss(self, logits, labels, valid, replays, replay_logits, cfg):
    ce = mean(*cross_entropy(logits, labels, valid))
    mse = logit_mse(replay_logits[0], replays[0].logits, replays[0].valid)
    return ce + cfg.alpha * mse, {"ce": ce, "logit_mse": mse}
