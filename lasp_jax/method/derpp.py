"""DER++ (Buzzega et al., 2020): DER's loss + beta x the cross-entropy of a second draw from the memory, independent
of the first (a sample may be in both), on the labels the memory kept."""

from __future__ import annotations

from lasp_jax.method.classifier import cross_entropy, mean
from lasp_jax.method.der import DER


class DERpp(DER):
  draws = 2
  metrics = ("loss", "ce", "logit_mse", "replay_ce", "z_norm", "z_var")

  def loss(self, logits, labels, valid, replays, replay_logits, cfg):
    loss, terms = super().loss(logits, labels, valid, replays[:1], replay_logits[:1], cfg)
    replay_ce = mean(*cross_entropy(replay_logits[1], replays[1].labels, replays[1].valid))
    return loss + cfg.beta * replay_ce, {**terms, "replay_ce": replay_ce}
