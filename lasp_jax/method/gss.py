"""Gradient-based Sample Selection (GSS-greedy; Aljundi et al., 2019), as the DER paper ran it (mammoth): a step is
ER's (the stream batch and a memory draw under one cross-entropy); then the batch is offered to the memory, which
keeps samples whose gradients point away from those it holds.

After the step, at the new weights (two plain SGD steps' worth: w - lr g), the gradient of the batch and of
``method_args.gss_minibatch_size`` remembered samples drawn at random give the batch's score c, the largest cosine
similarity + 1 (0.1 for an empty memory). Each sample in turn: while the memory has room it takes the next slot with
score c; once full, and only when c < 1, the sample's own score c_i (its gradient against the same drawn ones) is
set against a slot drawn with probability proportional to the kept scores, which it replaces with probability
s / (s + c_i). The memory is a reservoir buffer and each row's score. The cosines are read off the Gram matrix of
the rows' gradients, which a dense network gives from one backward pass (``sample_grads``): the same results as
forming each row's gradient (results/table1_mnist/gss_gram_rerun/) in a fraction of the time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from lasp_jax.method import buffer, sample_grads
from lasp_jax.method.base import Observation, embedding_stats
from lasp_jax.method.er import ER


def max_cosine(dots, norms, norm_g, valid):
  """max over the valid rows j of cos(g, G_j) = dots_j / (norms_j norm_g), + 1 (in [0, 2])."""
  cos = dots / (norms * norm_g + 1e-12)
  return jnp.max(jnp.where(valid, cos, -1.0)) + 1.0


def offer(buf: buffer.Buffer, scores, key, rows: dict, valid, batch_c, single_c):
  """The memory and its scores after the batch's samples are offered one by one (the rule in the docstring)."""
  capacity = scores.shape[0]

  def one(carry, inputs):
    buf, scores = carry
    row, ok, c_i, k = inputs
    k_slot, k_keep = jax.random.split(k)
    full = buf.seen >= capacity
    drawn = jax.random.categorical(k_slot, jnp.log(jnp.maximum(scores, 1e-30)))
    s = scores[drawn]
    replace = full & (batch_c < 1) & (jax.random.uniform(k_keep) < s / (s + c_i))
    slot = jnp.where(full, jnp.where(replace, drawn, capacity), buf.seen)
    slot = jnp.where(ok, slot, capacity)
    put = lambda field, v: field.at[slot].set(v.astype(field.dtype), mode="drop")
    buf = buffer.Buffer(put(buf.index, row["index"]), put(buf.domain, row["domain"]), put(buf.label, row["label"]),
                        put(buf.task, row["task"]), None, buf.seen + ok.astype(jnp.int32))
    scores = scores.at[slot].set(jnp.where(full, c_i, batch_c), mode="drop")
    return (buf, scores), None

  keys = jax.random.split(key, valid.shape[0])
  (buf, scores), _ = jax.lax.scan(one, (buf, scores), (rows, valid, single_c, keys))
  return buf, scores


class GSS(ER):
  def init_memory(self, config, stream, **_):
    return {"buffer": buffer.empty(config.memory.size), "scores": jnp.zeros(config.memory.size, jnp.float32)}

  def observe(self, s, *, model, aug_cfg, cfg) -> Observation:
    k_view, k_replay, k_gss, k_offer = jax.random.split(s.key, 4)
    mem = s.state.memory
    held = s._replace(state=s.state.replace(memory=mem["buffer"]))  # the draws read the reservoir buffer
    x, labels, loss, (terms, _, feats, stats), grads = self.step_gradients(held, k_view, k_replay, model, aug_cfg,
                                                                            cfg)
    moved = jax.tree.map(lambda p, g: p - s.lr * g, s.state.params, grads)
    batch_c, single_c = self.scores(moved, held, x, labels, model, aug_cfg, cfg, k_gss)
    rows = {"index": s.batch.index, "domain": s.batch.domain, "label": labels,
            "task": self.task_of(labels, s.batch.domain, cfg)}
    buf, scores = offer(mem["buffer"], mem["scores"], k_offer, rows, s.batch.valid, batch_c, single_c)
    z_norm, z_var = embedding_stats(jax.lax.stop_gradient(feats).astype(jnp.float32), s.batch.valid)
    return Observation(grads, stats, {"buffer": buf, "scores": scores},
                       {"loss": loss, **terms, "z_norm": z_norm, "z_var": z_var})

  def scores(self, params, held, x, labels, model, aug_cfg, cfg, key):
    """(the batch's score c, each stream sample's own score) at ``params``, against a random draw of remembered
    samples: cosines read off the Gram matrix of the rows' loss gradients."""
    k_draw, k_view = jax.random.split(key)
    buf = held.state.memory
    slots, valid = buffer.draw(buf, k_draw, cfg.gss_minibatch)
    drawn = self.views(k_view, held.data, buf.index[slots], buf.domain[slots], aug_cfg, cfg)
    n, w = x.shape[0], held.batch.valid.astype(jnp.float32)
    k = sample_grads.gram_blocks(model, {"params": params, "batch_stats": held.state.batch_stats},
                                 jnp.concatenate([x, drawn]), jnp.concatenate([labels, buf.label[slots]]),
                                 optax.softmax_cross_entropy_with_integer_labels, n=n, weights=w)
    norms = jnp.sqrt(jnp.maximum(k.diag, 0.0))
    own_drawn = k.cross
    count = jnp.maximum(jnp.sum(w), 1.0)  # the batch's gradient g: the mean of its rows'
    norm_g = jnp.sqrt(jnp.maximum(k.weighted, 0.0)) / count
    batch_c = jnp.where(buffer.filled(buf) > 0, max_cosine(w @ own_drawn / count, norms[n:], norm_g, valid), 0.1)
    single_c = jax.vmap(lambda dots, norm: max_cosine(dots, norms[n:], norm, valid))(own_drawn, norms[:n])
    return batch_c, single_c

