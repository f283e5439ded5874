"""Model shapes, parameter counts and PyTorch-equivalent initialization."""

import jax
import jax.numpy as jnp
import numpy as np

from lasp_jax.model import models
from tests.conftest import init, rand, tiny_config


def _count(tree):
  return sum(x.size for x in jax.tree.leaves(tree))


def test_resnet18_shapes_and_parameter_count():
  m = models.Model(models.ResNet(), models.ProjectionHead(512, 128))
  v = jax.eval_shape(lambda: m.init(jax.random.PRNGKey(0), jnp.zeros((2, 32, 32, 3)), train=False))
  assert _count(v["params"]["encoder"]) == 11_168_832  # torchvision-style CIFAR ResNet-18 encoder
  assert _count(v["params"]["head"]) == 512 * 512 + 512 + 512 * 128 + 128
  feats, z = jax.eval_shape(lambda: m.apply(m.init(jax.random.PRNGKey(0), jnp.zeros((2, 32, 32, 3))),
                                             jnp.zeros((5, 32, 32, 3)), train=False))
  assert feats.shape == (5, 512) and z.shape == (5, 128)


def test_mnist_net_shapes_and_unnormalized_head():
  m = models.Model(models.MnistNet(), models.ProjectionHead(500, 500, normalize=False))
  x = rand(3, 28, 28, 1)
  v = init(m, x, seed=1)
  assert _count(v["params"]["encoder"]) == (25 * 20 + 20) + (25 * 20 * 50 + 50) + (800 * 500 + 500)
  feats, z = m.apply(v, x)
  assert feats.shape == (3, 500) and z.shape == (3, 500)
  assert not np.allclose(np.linalg.norm(z, axis=1), 1.0)


def test_mnist_net_train_and_eval_forwards_agree():
  """Without BatchNorm the two modes are one function; they pool in different orders and forms (models.relu_pool)."""
  net = models.MnistNet(width=0.5)
  x = rand(4, 28, 28, 1)
  v = init(net, x, seed=2, train=False)
  np.testing.assert_allclose(net.apply(v, x, train=True), net.apply(v, x, train=False), rtol=1e-5, atol=1e-6)


def test_pytorch_equivalent_init_statistics():
  m = models.Model(models.ResNet(), models.ProjectionHead(512, 128))
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


def test_center_subtracts_the_valid_rows_mean_and_keeps_a_running_mean():
  """Train mode: the mean over the valid rows only (a padded row of 1000s must not move it), and the running mean
  0.9 * old + 0.1 * that mean; eval mode subtracts the running mean. Hand values."""
  x = jnp.array([[1.0, 2.0], [3.0, 6.0], [1000.0, 1000.0], [5.0, 1.0]])
  mask = jnp.array([True, True, False, True])
  center = models.Center()
  v = center.init(jax.random.PRNGKey(0), x, train=True, mask=mask)
  np.testing.assert_array_equal(v["batch_stats"]["mean"], [0.0, 0.0])  # init does not update it
  out, upd = center.apply(v, x, train=True, mask=mask, mutable=["batch_stats"])
  np.testing.assert_allclose(out, x - jnp.array([3.0, 3.0]), rtol=1e-6)
  np.testing.assert_allclose(upd["batch_stats"]["mean"], [0.3, 0.3], rtol=1e-6)
  np.testing.assert_allclose(center.apply(upd, x, train=False), x - 0.3, rtol=1e-6)
  unmasked, _ = center.apply(v, x[:2], train=True, mutable=["batch_stats"])
  np.testing.assert_allclose(unmasked, x[:2] - jnp.array([2.0, 4.0]), rtol=1e-6)
