"""Experience Replay (ER; Chaudhry et al., 2019, as the DER paper runs it): a reservoir memory of the stream; every
step joins a draw of ``method_args.minibatch_size`` remembered samples to the stream batch under one
cross-entropy (the mean over the stream's and the draw's rows together)."""

from __future__ import annotations

from lasp_jax.method.classifier import Classifier, cross_entropy, mean


class ER(Classifier):
  draws = 1

  def loss(self, logits, labels, valid, replays, replay_logits, cfg):
    (r,), (r_logits,) = replays, replay_logits
    (s1, n1), (s2, n2) = cross_entropy(logits, labels, valid), cross_entropy(r_logits, r.labels, r.valid)
    ce = mean(s1 + s2, n1 + n2)
    return ce, {"ce": ce}
