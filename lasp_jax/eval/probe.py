"""Linear-probe evaluation (protocol section 7), compiled end to end.

A linear classifier on the frozen encoder's (eval-mode, unnormalized) features,
trained with class- (or domain-) balanced sampling with replacement, SGD momentum
0.9, step decay x0.2 at 60/75/90% of the epochs; tested after every epoch.

Cost: with ``augment=True`` (faithful) every epoch re-augments one view per
sampled image and re-runs the encoder forward (no backward); all epochs run in
one ``lax.scan`` inside one jit. With ``augment=False`` the features are
extracted once and the 100 epochs cost almost nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lasp_jax import progress
from lasp_jax.data import augment
from lasp_jax.eval import linear
from lasp_jax.method.features import encode, extract_features
from lasp_jax.model import models
from lasp_jax.platform.optim import with_learning_rate


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
  epochs: int = 100
  lr: float = 1.0
  batch_size: int = 256
  milestones: Tuple[float, ...] = (0.6, 0.75, 0.9)  # fractions of the epochs
  decay_epochs: Tuple[int, ...] = ()  # absolute epochs instead (the published probe: 60, 75, 90)
  decay: float = 0.2
  momentum: float = 0.9
  augment: bool = True
  select_best_on_test: bool = False
  standardize: bool = False  # features -> (x - mean) / std of the probe's training rows


class ProbeData(NamedTuple):
  """Probe inputs (device arrays), padded to fixed sizes so no task recompiles.

  Train rows index into the stream's train set; padding rows have weight 0.
  Test padding rows have ``test_task == num_tasks`` (outside every segment).
  """
  train_index: jax.Array   # (N,) into DeviceData.images
  train_domain: jax.Array  # (N,)
  train_label: jax.Array   # (N,) class to predict
  train_weight: jax.Array  # (N,) sampling weight (balanced)
  train_current: jax.Array  # (N,) bool: the current task's own rows (not the memory's)
  test_feats: jax.Array    # (Nt, F)
  test_label: jax.Array    # (Nt,)
  test_task: jax.Array     # (Nt,) task whose accuracy the sample counts for
  test_index: jax.Array    # (Nt,) into the test images (for features of another kind)
  test_domain: jax.Array   # (Nt,)


@dataclasses.dataclass(frozen=True)
class Layout:
  """What a read-out needs to know of the task stream (hashable: a static argument of its programs)."""
  num_classes: int
  num_tasks: int
  classes_per_task: int
  metrics: Tuple[str, ...]      # "class_il" / "task_il" / "domain_il", the stream's
  crop_current: bool = True     # the probe re-augments the current task's rows (else: rotated only)

  @classmethod
  def of(cls, stream) -> "Layout":
    return cls(stream.num_classes, stream.num_tasks, stream.classes_per_task, tuple(stream.metrics),
               stream.probe_crops_current)


class ProbeResult(NamedTuple):
  per_task: dict      # metric -> (num_tasks,) accuracies in percent (NaN for unseen)
  overall: dict       # metric -> accuracy over all test samples, percent
  epoch: dict         # metric -> epoch the numbers come from


class Linear(nn.Module):
  num_classes: int

  @nn.compact
  def __call__(self, x):
    return models.torch_dense(self.num_classes, x.shape[-1], "fc")(x)


def probe_views(key, images_u8, angles, current, *, aug_cfg, crop_current: bool):
  """One augmented view per image for the probe's training rows.

  ``crop_current=False`` (Rotated MNIST, as published): the current task's images
  are rotated only (no crop), the memory's rotated and randomly cropped; otherwise
  every row is augmented.
  """
  x = augment.one_view(key, images_u8, angles, aug_cfg)
  if crop_current:
    return x
  plain = augment.test_transform(images_u8, angles, aug_cfg)
  return jnp.where(current[:, None, None, None], plain, x)


def _lr_per_epoch(cfg: ProbeConfig):
  marks = list(cfg.decay_epochs) or [int(round(m * cfg.epochs)) for m in cfg.milestones]
  return np.array([cfg.lr * cfg.decay ** sum(e >= m for m in marks) for e in range(cfg.epochs)], np.float32)


@functools.partial(jax.jit, static_argnames=("layout",))
def _accuracies(logits, labels, tasks, layout: Layout):
  """Per-task and overall accuracy for each metric of the stream (one program; op by op it was ~20)."""
  out = {}
  num_tasks, classes_per_task = layout.num_tasks, layout.classes_per_task
  for name in layout.metrics:
    masked = logits
    if name == "task_il":
      block = labels // classes_per_task
      cls_block = jnp.arange(logits.shape[-1]) // classes_per_task
      masked = jnp.where(cls_block[None, :] == block[:, None], logits, -jnp.inf)
    correct = (jnp.argmax(masked, -1) == labels).astype(jnp.float32)
    real = (tasks < num_tasks).astype(jnp.float32)
    count = jax.ops.segment_sum(real, tasks, num_tasks)
    per_task = jax.ops.segment_sum(correct * real, tasks, num_tasks) / jnp.where(count > 0, count, jnp.nan)
    out[name] = (100 * per_task, 100 * jnp.sum(correct * real) / jnp.sum(real))
  return out


def masked_sgd_step(params, opt_state, feats, labels, valid, *, clf, tx):
  """One probe SGD step on the rows where ``valid``; with no valid row, nothing moves.

  The probe's row count is padded to a fixed size, so an epoch's last steps can
  hold no real sample: such a step must leave the classifier and its momentum as
  they are (an optimizer update with a zero gradient would still move them).
  """
  def loss_fn(p):
    ce = optax.softmax_cross_entropy_with_integer_labels(clf.apply(p, feats), labels)
    return jnp.sum(jnp.where(valid, ce, 0)) / jnp.maximum(jnp.sum(valid), 1)

  updates, new_opt = tx.update(jax.grad(loss_fn)(params), opt_state, params)
  new = (optax.apply_updates(params, updates), new_opt)
  return jax.tree.map(lambda a, b: jnp.where(jnp.any(valid), a, b), new, (params, opt_state))


@functools.partial(jax.jit, static_argnames=("model", "aug_cfg", "cfg", "layout"))
def _train_probe(key, variables, images, angles, pd: ProbeData, train_feats, stats, *, model, aug_cfg,
                 cfg: ProbeConfig, layout: Layout):
  clf = Linear(layout.num_classes)
  n_rows = pd.train_index.shape[0]
  n = jnp.sum(pd.train_weight > 0)  # one epoch = as many draws as real samples
  steps = -(-n_rows // cfg.batch_size)
  k_init, k_run = jax.random.split(key)
  params = clf.init(k_init, jnp.zeros((1, pd.test_feats.shape[-1])))
  tx = optax.inject_hyperparams(optax.sgd)(learning_rate=cfg.lr, momentum=cfg.momentum)
  opt_state = tx.init(params)
  probs = pd.train_weight / jnp.sum(pd.train_weight)

  mean, scale = stats

  def features(rows, key):
    if not cfg.augment:
      return (train_feats[rows] - mean) / scale
    x = probe_views(key, images[pd.train_index[rows]], angles[pd.train_domain[rows]], pd.train_current[rows],
                    aug_cfg=aug_cfg, crop_current=layout.crop_current)
    return (encode(model, variables, x) - mean) / scale

  def step(carry, inputs):
    rows, valid, key = inputs
    feats = jax.lax.stop_gradient(features(rows, key))
    return masked_sgd_step(*carry, feats, pd.train_label[rows], valid, clf=clf, tx=tx), None

  def epoch(carry, inputs):
    params, opt_state = carry
    lr, key = inputs
    k_sample, k_aug = jax.random.split(key)
    sample = jax.random.choice(k_sample, n_rows, (steps * cfg.batch_size,), p=probs)
    valid = jnp.arange(steps * cfg.batch_size) < n
    opt_state = with_learning_rate(opt_state, lr)
    (params, opt_state), _ = jax.lax.scan(
        step, (params, opt_state),
        (sample.reshape(steps, -1), valid.reshape(steps, -1), jax.random.split(k_aug, steps)))
    logits = clf.apply(params, (pd.test_feats - mean) / scale)
    acc = _accuracies(logits, pd.test_label, pd.test_task, layout)
    jax.debug.callback(progress.tick, acc[next(iter(acc))][1])  # the probe's progress bar, one tick an epoch
    return (params, opt_state), acc

  lrs = jnp.asarray(_lr_per_epoch(cfg))
  _, accs = jax.lax.scan(epoch, (params, opt_state), (lrs, jax.random.split(k_run, cfg.epochs)))
  return accs


@jax.jit
def feature_moments(feats, weight):
  """Weighted per-feature mean and std (+1e-6): padding rows (weight 0) do not count.

  Unnormalized ReLU features span orders of magnitude across dimensions, which
  leaves a fixed-lr SGD probe far from its optimum (measured: 20 points of
  Class-IL below a converged classifier on the same features); a linear model
  is unchanged by this affine map, only its optimization is.
  """
  w = weight / jnp.sum(weight)
  mean = w @ feats
  return mean, jnp.sqrt(w @ (feats - mean) ** 2) + 1e-6


def linear_readout(model, variables, data, test_data, pd: ProbeData, *, kind: str, aug_cfg,
                   layout: Layout) -> ProbeResult:
  """The converged reference classifier (``linear.fit_logistic``) on the probe's data.

  Same training rows and balancing weights as the SGD probe, same test rows;
  ``kind="pixels"`` is the raw-pixel baseline, ``kind="encoder"`` checks the
  probe's convergence on the same frozen features.
  """
  weight = np.asarray(pd.train_weight)
  rows = np.flatnonzero(weight > 0)
  feats = lambda d, idx, dom: np.asarray(extract_features(model, variables, d, np.asarray(idx), np.asarray(dom),
                                                          aug_cfg, kind=kind))
  clf = linear.fit_logistic(feats(data, np.asarray(pd.train_index)[rows], np.asarray(pd.train_domain)[rows]),
                            np.asarray(pd.train_label)[rows], num_classes=layout.num_classes,
                            sample_weight=weight[rows])
  # The encoder's test features are the probe data's own (the same program on the same rows): not extracted twice.
  test = np.asarray(pd.test_feats) if kind == "encoder" else feats(test_data, pd.test_index, pd.test_domain)
  return scores(jnp.asarray(clf.logits(test).astype(np.float32)), pd, layout)


def scores(logits, pd: ProbeData, layout: Layout) -> ProbeResult:
  """A read-out's accuracies from its logits on the probe data's test rows (every metric of the stream)."""
  accs = _accuracies(logits, pd.test_label, pd.test_task, layout)
  return ProbeResult({n: np.asarray(a[0]) for n, a in accs.items()}, {n: float(a[1]) for n, a in accs.items()},
                     {n: None for n in accs})


def probe_curves(key, model, variables, data, pd: ProbeData, *, aug_cfg, cfg: ProbeConfig, layout: Layout) -> dict:
  """Trains the probe; {metric: ((epochs, num_tasks) per-task, (epochs,) overall)} accuracy after every epoch."""
  train_feats, stats = None, (jnp.zeros(()), jnp.ones(()))
  if not cfg.augment or cfg.standardize:
    train_feats = extract_features(model, variables, data, np.asarray(pd.train_index),
                                   np.asarray(pd.train_domain), aug_cfg)
  if cfg.standardize:
    stats = feature_moments(train_feats, pd.train_weight)
  with progress.bar(cfg.epochs, "probe", unit="epoch"):
    accs = _train_probe(key, variables, data.images, data.angles, pd, train_feats, stats, model=model,
                        aug_cfg=aug_cfg, cfg=cfg, layout=layout)
    return {name: (np.asarray(t), np.asarray(a)) for name, (t, a) in accs.items()}


def run_probe(key, model, variables, data, pd: ProbeData, *, cfg: ProbeConfig, **kwargs) -> ProbeResult:
  """Trains the probe and returns the last-epoch (or best-on-test) accuracies."""
  per_task, overall, epochs = {}, {}, {}
  for name, (task_acc, all_acc) in probe_curves(key, model, variables, data, pd, cfg=cfg, **kwargs).items():
    e = int(np.argmax(all_acc)) if cfg.select_best_on_test else cfg.epochs - 1
    per_task[name] = task_acc[e]
    overall[name] = float(all_acc[e])
    epochs[name] = e
  return ProbeResult(per_task, overall, epochs)
