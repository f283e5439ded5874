"""Flax (Linen) encoders and projection head of Co2L/LASP, PyTorch-equivalent init.

Pooling and normalization are small modules of their own (not inline jnp calls) so
that excitation backprop (``salience.py``) can intercept every layer by type.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from lasp_jax.model import winograd
from lasp_jax.model.conv import conv_for_backend
from lasp_jax.platform import cpu_kernels
from lasp_jax.platform.numerics import l2_normalize

Dtype = Any

# PyTorch defaults: Linear/Conv weights U(+-1/sqrt(fan_in)) (kaiming_uniform, a=sqrt 5),
# ResNet convs kaiming_normal(fan_out, relu).
torch_default_kernel_init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
resnet_conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


def torch_bias_init(fan_in: int):
  """PyTorch's default bias init U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
  bound = 1.0 / jnp.sqrt(fan_in)

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  return init


def torch_dense(features: int, fan_in: int, name: str, dtype: Dtype = jnp.float32) -> nn.Dense:
  return nn.Dense(features, kernel_init=torch_default_kernel_init, bias_init=torch_bias_init(fan_in),
                  name=name, dtype=dtype)


class GlobalAvgPool(nn.Module):
  """Mean over the spatial axes of an NHWC map."""

  @nn.compact
  def __call__(self, x):
    return jnp.mean(x, axis=(1, 2))


class L2Normalize(nn.Module):
  """Row L2 normalization of the embeddings."""

  @nn.compact
  def __call__(self, x):
    return l2_normalize(x)


class GroupedBatchNorm(nn.Module):
  """Train-mode BatchNorm, with batch statistics per contiguous 1/``groups`` of the batch.

  The running variance is stored unbiased (the batch variance times n / (n - 1), n the
  values per channel), as PyTorch's BatchNorm stores it; the batch itself is normalized
  with the biased variance, as in PyTorch.

  The published runs wrapped the encoder in ``nn.DataParallel`` over two GPUs
  without SyncBN: each replica normalizes its half of the batch ``[view 1; view 2]``
  (``torch.chunk`` of equal halves), i.e. view by view, and only the replica on the
  first device writes the running statistics (DataParallel keeps device 0's buffer
  updates), so they come from group 0. Parameters and statistics have nn.BatchNorm's
  names and shapes; running variance is the biased batch variance, as nn.BatchNorm's.
  """
  groups: int
  momentum: float = 0.9
  epsilon: float = 1e-5
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x, mask=None):
    c = x.shape[-1]
    scale = self.param("scale", nn.initializers.ones, (c,))
    bias = self.param("bias", nn.initializers.zeros, (c,))
    ra_mean = self.variable("batch_stats", "mean", jnp.zeros, (c,))
    ra_var = self.variable("batch_stats", "var", jnp.ones, (c,))
    # Train mode only: in eval mode groups change nothing and nn.BatchNorm runs (see norm_layer).
    xg = x.astype(jnp.float32).reshape((self.groups, x.shape[0] // self.groups) + x.shape[1:])
    w = jnp.ones(xg.shape[:-1] + (1,)) if mask is None else jnp.broadcast_to(
        mask.reshape((self.groups, -1) + mask.shape[1:]), xg.shape[:-1] + (1,)).astype(jnp.float32)
    axes = tuple(range(1, xg.ndim - 1))
    n = jnp.maximum(jnp.sum(w, axes, keepdims=True), 1.0)
    mean = jnp.sum(w * xg, axes, keepdims=True) / n
    var = jnp.sum(w * (xg - mean) ** 2, axes, keepdims=True) / n
    if not self.is_initializing():
      m = self.momentum
      ra_mean.value = m * ra_mean.value + (1 - m) * mean[0].reshape(c)
      n0 = n[0].reshape(-1)[0]
      ra_var.value = m * ra_var.value + (1 - m) * var[0].reshape(c) * n0 / jnp.maximum(n0 - 1.0, 1.0)
    y = ((xg - mean) * jax.lax.rsqrt(var + self.epsilon)).reshape(x.shape)
    return (y * scale + bias).astype(self.dtype)


def norm_layer(train: bool, name: str, dtype: Dtype, groups: int = 1) -> nn.Module:
  """The nets' BatchNorm: per-group batch statistics in training, the running ones in eval mode."""
  # PyTorch momentum 0.1 == Flax momentum 0.9. Eval mode uses the running statistics: groups change nothing.
  if train:
    return GroupedBatchNorm(groups, name=name, dtype=dtype)
  return nn.BatchNorm(use_running_average=True, momentum=0.9, epsilon=1e-5, name=name, dtype=dtype)


class BasicBlock(nn.Module):
  """ResNet BasicBlock: conv3x3-BN-ReLU-conv3x3-BN plus (projection) shortcut, ReLU."""
  features: int
  strides: int = 1
  dtype: Dtype = jnp.float32
  conv_fn: Any = None  # lax.conv_general_dilated stand-in (see conv.py); None = XLA's
  bn_groups: int = 1

  @nn.compact
  def __call__(self, x, train: bool, mask=None):
    conv = functools.partial(nn.Conv, use_bias=False, kernel_init=resnet_conv_init, dtype=self.dtype,
                             conv_general_dilated=self.conv_fn)
    batch_norm = functools.partial(norm_layer, groups=self.bn_groups)
    y = conv(self.features, (3, 3), self.strides, padding=1, name="conv1")(x)
    y = nn.relu(batch_norm(train, "bn1", self.dtype)(y, mask=mask))
    y = conv(self.features, (3, 3), 1, padding=1, name="conv2")(y)
    y = batch_norm(train, "bn2", self.dtype)(y, mask=mask)
    if self.strides != 1 or x.shape[-1] != self.features:
      x = conv(self.features, (1, 1), self.strides, padding=0, name="shortcut_conv")(x)
      x = batch_norm(train, "shortcut_bn", self.dtype)(x, mask=mask)
    return nn.relu(y + x)


class ResNet(nn.Module):
  """ResNet with the CIFAR stem (3x3 stride-1 conv, no max-pool).

  ``num_blocks=(2, 2, 2, 2)`` and ``widths=(64, 128, 256, 512)`` is ResNet-18.
  """
  num_blocks: Sequence[int] = (2, 2, 2, 2)
  widths: Sequence[int] = (64, 128, 256, 512)
  dtype: Dtype = jnp.float32
  conv_fn: Any = None
  bn_groups: int = 1

  @nn.compact
  def __call__(self, x, train: bool = True, mask=None):
    """``mask`` (N,) bool: rows that enter the BatchNorm statistics (padding excluded)."""
    mask = None if mask is None else mask[:, None, None, None]
    batch_norm = functools.partial(norm_layer, groups=self.bn_groups)
    x = nn.Conv(self.widths[0], (3, 3), 1, padding=1, use_bias=False, kernel_init=resnet_conv_init,
                dtype=self.dtype, conv_general_dilated=self.conv_fn, name="conv1")(x)
    x = nn.relu(batch_norm(train, "bn1", self.dtype)(x, mask=mask))
    for stage, (blocks, width) in enumerate(zip(self.num_blocks, self.widths)):
      for b in range(blocks):
        strides = 2 if (stage > 0 and b == 0) else 1
        x = BasicBlock(width, strides, self.dtype, self.conv_fn, self.bn_groups,
                       name=f"layer{stage + 1}_{b}")(x, train, mask)
    return GlobalAvgPool(name="pool")(x)


def window_max_pool_2x2(x):
  """2x2 / stride-2 max pooling of an NHWC map with even height and width, as a reshape + max.

  Same values as ``nn.max_pool(x, (2, 2), (2, 2))``, and its gradient wherever a window has one
  maximum (at a tie JAX's reduce gradient shares it among the tied inputs). Its gradient is an
  elementwise mask instead of XLA's select-and-scatter, which dominated the net's backward pass
  on XLA:CPU. The form for the eval forward: with it XLA:CPU's YNNPACK runs the R-MNIST net's
  whole forward as one fused kernel, 2.5x faster than with ``max_pool_2x2``.
  """
  return _windows(x).max(axis=(2, 4))


def _windows(x):
  """(N, H/2, 2, W/2, 2, C): each 2x2 window of an NHWC map along axes 2 and 4."""
  n, h, w, c = x.shape
  return x.reshape(n, h // 2, 2, w // 2, 2, c)


@jax.custom_vjp
def max_pool_2x2(x):
  """``window_max_pool_2x2``'s values and gradient, bit for bit, for a training forward.

  The forward is the max of the window's four strided slices, an elementwise loop that XLA:CPU
  runs 4-5x faster than the reduce over the stored (2, 2) windows of the same map (R-MNIST's
  1,024 x 24 x 24 x 20 conv1 output) where the forward is split at the activations a backward
  pass needs; the gradient is JAX's own for that reduce (``_pool_bwd``).
  """
  return jnp.maximum(jnp.maximum(x[:, 0::2, 0::2], x[:, 0::2, 1::2]), jnp.maximum(x[:, 1::2, 0::2], x[:, 1::2, 1::2]))


def _pool_fwd(x):
  y = max_pool_2x2(x)
  return y, (x, y)


def _pool_bwd(res, g):
  """JAX's gradient of ``reduce_max`` over each window, op for op: ties share it equally.

  The slices' own autodiff would split a three-way tie 1/4, 1/4, 1/2 (pairwise maxima);
  this keeps every gradient bit-identical to the reduce's.
  """
  x, y = res
  hit = (_windows(x) == y[:, :, None, :, None]).astype(g.dtype)
  share = g / hit.sum(axis=(2, 4))
  return ((hit * share[:, :, None, :, None]).reshape(x.shape),)


max_pool_2x2.defvjp(_pool_fwd, _pool_bwd)


def relu_pool(x, train: bool):
  """ReLU and 2x2 max-pool, in the order and form XLA:CPU runs fastest; the same values and gradients in all.

  Training: the ReLU first, so the pooled map is stored as is and the weight gradient's transpose of it is a
  plain copy (with the ReLU after the pool XLA:CPU fuses it into that transpose, 10x slower), and the pool as
  ``max_pool_2x2``. Eval: pool first (4x fewer ReLUs) as ``window_max_pool_2x2``, which XLA:CPU fuses with the
  convolutions into one kernel (BENCHMARKS.md).
  """
  return max_pool_2x2(nn.relu(x)) if train else nn.relu(window_max_pool_2x2(x))


class MnistNet(nn.Module):
  """The R-MNIST encoder: conv5x5(20)-pool-conv5x5(50)-pool-fc(500), no BatchNorm by default.

  ``batch_norm=True`` puts a BatchNorm before every ReLU. Without it, SupCon on
  two-class tasks (Split-MNIST) drives the net into a fixed point it cannot
  leave: after task 0 the new task's digits all map to one embedding, the
  loss sits at log(2B - 1) with zero gradient and ~2/3 of the units are dead
  (measured on configs/mnist5k.py with co2l and finetune); BatchNorm re-centres
  every unit on the batch, so no unit can die for all inputs.
  """
  width: float = 1.0
  dtype: Dtype = jnp.float32
  conv_fn: Any = None
  batch_norm: bool = False
  bn_groups: int = 1

  @nn.compact
  def __call__(self, x, train: bool = True, mask=None):
    batch_norm = functools.partial(norm_layer, groups=self.bn_groups)
    c1, c2, f = (max(1, int(round(c * self.width))) for c in (20, 50, 500))
    bn_mask = None if mask is None else mask[:, None, None, None]
    for name, ch in (("conv1", c1), ("conv2", c2)):
      fan_in = x.shape[-1] * 25
      # Explicit zero padding ("VALID"): the CPU matmul-gradient conv (conv.py) takes explicit pads only.
      x = nn.Conv(ch, (5, 5), padding=((0, 0), (0, 0)), kernel_init=torch_default_kernel_init,
                  bias_init=torch_bias_init(fan_in), dtype=self.dtype, conv_general_dilated=self.conv_fn,
                  name=name)(x)
      if self.batch_norm:
        x = batch_norm(train, f"{name}_bn", self.dtype)(x, mask=bn_mask)
      x = relu_pool(x, train)
    x = x.reshape(x.shape[0], -1)
    x = torch_dense(f, x.shape[-1], "fc", self.dtype)(x)
    if self.batch_norm:
      x = batch_norm(train, "fc_bn", self.dtype)(x, mask=None if mask is None else mask[:, None])
    return nn.relu(x)


class Center(nn.Module):
  """Subtracts the batch's mean (valid rows; the running mean in eval mode) from every feature."""
  momentum: float = 0.9

  @nn.compact
  def __call__(self, x, train: bool, mask=None):
    ra_mean = self.variable("batch_stats", "mean", jnp.zeros, (x.shape[-1],))
    if not train:
      return x - ra_mean.value
    w = jnp.ones(x.shape[:1] + (1,), x.dtype) if mask is None else mask[:, None].astype(x.dtype)
    mean = jnp.sum(w * x, axis=0) / jnp.maximum(jnp.sum(w), 1.0)
    if not self.is_initializing():
      ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
    return x - mean


class ProjectionHead(nn.Module):
  """Linear-ReLU-Linear, optionally centred on the batch, then optional L2 normalization.

  ``center``: without it SupCon on a two-class task can collapse the embedding through a common offset:
  configs/mnist5k.py finetune, after task 1, ||batch mean of the head's output|| 647 against a spread of 188
  (49 and 229 before), SupCon at its constant-embedding value, gradient norm 0.08. Centred, no common offset
  survives normalization.
  """
  hidden: int
  embedding_dim: int
  normalize: bool = True
  dtype: Dtype = jnp.float32
  center: bool = False

  @nn.compact
  def __call__(self, x, train: bool = True, mask=None):
    x = nn.relu(torch_dense(self.hidden, x.shape[-1], "fc1", self.dtype)(x))
    x = torch_dense(self.embedding_dim, self.hidden, "fc2", self.dtype)(x)
    x = x.astype(jnp.float32)  # Loss reductions stay in float32 under bf16 compute.
    if self.center:
      x = Center(name="center")(x, train, mask)
    return L2Normalize(name="normalize")(x) if self.normalize else x


class MLP(nn.Module):
  """The DER paper's MNIST network (mammoth's MNISTMLP): flatten, then Linear-ReLU per hidden width; Xavier-uniform
  weights and zero biases, as mammoth initializes it."""
  hidden: Sequence[int] = (100, 100)
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = True, mask=None):
    del train, mask
    x = x.reshape(x.shape[0], -1)
    for i, width in enumerate(self.hidden):
      x = nn.relu(nn.Dense(width, kernel_init=nn.initializers.xavier_uniform(), name=f"fc{i + 1}",
                           dtype=self.dtype)(x))
    return x


class ClassifierHead(nn.Module):
  """A linear classifier over the representation (the cross-entropy family's head); ``hidden``: its input width."""
  hidden: int
  num_classes: int
  dtype: Dtype = jnp.float32
  xavier: bool = False   # mammoth's init of the MLP's classifier (else PyTorch's default Linear init)

  @nn.compact
  def __call__(self, x, train: bool = True, mask=None):
    del train, mask
    if self.xavier:
      dense = nn.Dense(self.num_classes, kernel_init=nn.initializers.xavier_uniform(), name="fc", dtype=self.dtype)
    else:
      dense = torch_dense(self.num_classes, self.hidden, "fc", self.dtype)
    return dense(x).astype(jnp.float32)


class Model(nn.Module):
  """Encoder + head (projection head or classifier). Returns (representation, head output)."""
  encoder: nn.Module
  head: nn.Module

  def __call__(self, x, train: bool = True, mask=None):
    feats = self.encoder(x, train=train, mask=mask)
    return feats, self.head(feats, train=train, mask=mask)

  def encode(self, x, train: bool = False):
    return self.encoder(x, train=train).astype(jnp.float32)

  def classify(self, feats):
    """The head on given representations (eval mode): a classifier's logits from features."""
    return self.head(feats, train=False)


def build_model(config, head: str = "projection", num_classes: int = 0) -> Model:
  """Builds the encoder named by ``config.model`` (``resnet18``, ``mnistnet`` or ``mlp``) with a ``head``:
  ``projection`` (the contrastive family's) or ``classifier`` (``num_classes`` logits)."""
  m = config.model
  dtype = jnp.dtype(config.get("compute_dtype", "float32"))
  conv_fn = conv_for_backend(cpu_kernels.of_model(m).conv_backward)
  if m.get("winograd", 0):
    conv_fn = winograd.winograd_conv(m.winograd, conv_fn)
  if m.name == "resnet18":
    blocks = tuple(m.get("num_blocks", (2, 2, 2, 2)))
    widths = tuple(max(1, int(round(w * m.width))) for w in (64, 128, 256, 512))[:len(blocks)]
    encoder = ResNet(blocks, widths, dtype=dtype, conv_fn=conv_fn, bn_groups=m.get("bn_groups", 1))
    feat_dim = widths[-1]
  elif m.name == "mnistnet":
    encoder = MnistNet(m.width, dtype=dtype, conv_fn=conv_fn, batch_norm=m.get("batch_norm", False),
                       bn_groups=m.get("bn_groups", 1))
    feat_dim = max(1, int(round(500 * m.width)))
  elif m.name == "mlp":
    encoder = MLP(tuple(m.hidden), dtype=dtype)
    feat_dim = m.hidden[-1]
  else:
    raise ValueError(f"unknown model.name {m.name!r}; expected 'resnet18', 'mnistnet' or 'mlp'")
  if head == "classifier":
    return Model(encoder, ClassifierHead(feat_dim, num_classes, dtype=dtype, xavier=m.name == "mlp"))
  return Model(encoder, ProjectionHead(feat_dim, m.embedding_dim, m.normalize_embedding, dtype=dtype,
                                       center=m.get("head_center", False)))


def feature_dim(model: Model) -> int:
  return model.head.hidden
