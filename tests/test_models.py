"""Model shapes, parameter counts and PyTorch-equivalent initialization."""

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax import models
from tests.conftest import init, rand, tiny_config


def _count(tree):
  return sum(x.size for x in jax.tree.leaves(tree))


def test_resnet18_shapes_and_parameter_count():
  m = models.ContrastiveModel(models.ResNet(), models.ProjectionHead(512, 128))
  v = jax.eval_shape(lambda: m.init(jax.random.PRNGKey(0), jnp.zeros((2, 32, 32, 3)), train=False))
  assert _count(v["params"]["encoder"]) == 11_168_832  # torchvision-style CIFAR ResNet-18 encoder
  assert _count(v["params"]["head"]) == 512 * 512 + 512 + 512 * 128 + 128
  feats, z = jax.eval_shape(lambda: m.apply(m.init(jax.random.PRNGKey(0), jnp.zeros((2, 32, 32, 3))),
                                             jnp.zeros((5, 32, 32, 3)), train=False))
  assert feats.shape == (5, 512) and z.shape == (5, 128)


def test_mnist_net_shapes_and_unnormalized_head():
  m = models.ContrastiveModel(models.MnistNet(), models.ProjectionHead(500, 500, normalize=False))
  x = rand(3, 28, 28, 1)
  v = init(m, x, seed=1)
  assert _count(v["params"]["encoder"]) == (25 * 20 + 20) + (25 * 20 * 50 + 50) + (800 * 500 + 500)
  feats, z = m.apply(v, x)
  assert feats.shape == (3, 500) and z.shape == (3, 500)
  assert not np.allclose(np.linalg.norm(z, axis=1), 1.0)


def test_pytorch_equivalent_init_statistics():
  m = models.ContrastiveModel(models.ResNet(), models.ProjectionHead(512, 128))
  p = init(m, jnp.zeros((1, 32, 32, 3)), train=False)["params"]
  k = np.asarray(p["encoder"]["layer3_0"]["conv2"]["kernel"])  # kaiming normal, fan_out = 9 * 256
  assert abs(k.std() - np.sqrt(2 / (9 * 256))) < 0.02 * np.sqrt(2 / (9 * 256))
  w = np.asarray(p["head"]["fc1"]["kernel"])  # U(+-1/sqrt(512))
  assert abs(np.abs(w).max() - 1 / np.sqrt(512)) < 1e-3 and abs(w.mean()) < 1e-3
  b = np.asarray(p["head"]["fc1"]["bias"])
  assert np.abs(b).max() <= 1 / np.sqrt(512) and np.abs(b).max() > 0.8 / np.sqrt(512)
  assert np.all(np.asarray(p["encoder"]["bn1"]["scale"]) == 1)


def test_width_multiplier_and_build_model():
  c = tiny_config(**{"model.name": "resnet18", "model.width": 0.125})
  m = models.build_model(c)
  v = jax.eval_shape(lambda: m.init(jax.random.PRNGKey(0), jnp.zeros((2, 28, 28, 1)), train=False))
  assert v["params"]["encoder"]["conv1"]["kernel"].shape == (3, 3, 1, 8)
  assert models.feature_dim(m) == 64
  c.model.num_blocks = (1, 1)  # two stages: the head follows the last stage's width
  m = models.build_model(c)
  feats, z = jax.eval_shape(lambda x: m.apply(m.init(jax.random.PRNGKey(0), x, train=False), x, train=False),
                            jnp.zeros((2, 28, 28, 1)))
  assert feats.shape == (2, 16) and models.feature_dim(m) == 16
