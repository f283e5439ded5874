"""Excitation-backprop salience and gradient modulation against the goldens."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.method import modulation, salience
from lasp_jax.model import models
from lasp_jax.model.conv import matmul_grad_conv
from tests.conftest import golden_params, init, rand

F32 = np.float32
TOL = dict(rtol=1e-4, atol=1e-6)


def _head_params(g):
  return {"fc1": {"kernel": g["W1"].T, "bias": g["b1"]}, "fc2": {"kernel": g["W2"].T, "bias": g["b2"]}}


class _Identity(models.nn.Module):
  @models.nn.compact
  def __call__(self, x, train=False, mask=None):
    return x


def _mlp(g):
  model = models.Model(_Identity(), models.ProjectionHead(5, 4, True))
  params = jax.tree.map(lambda a: jnp.asarray(a, F32), {"head": _head_params(g)})
  return model, params


@golden_params("eb")
def test_eb_mlp_golden(golden):
  g = golden
  model, params = _mlp(g)
  x = jnp.asarray(g["x"], F32)
  gamma, p_x = salience.excitation_backprop(model, {"params": params}, x, jnp.asarray(g["p_top"]))
  np.testing.assert_allclose(gamma["head"]["fc1"]["kernel"], g["gamma_W1"].T, **TOL)
  np.testing.assert_allclose(gamma["head"]["fc2"]["kernel"], g["gamma_W2"].T, **TOL)
  np.testing.assert_allclose(p_x, g["P_x"], **TOL)
  gamma, p_x = salience.excitation_backprop(model, {"params": params}, x, jnp.asarray(g["p_top"]),
                                            abs_weight_layers=())
  np.testing.assert_allclose(gamma["head"]["fc1"]["kernel"], g["gamma_W1_plain"].T, **TOL)
  np.testing.assert_allclose(gamma["head"]["fc2"]["kernel"], g["gamma_W2_plain"].T, **TOL)
  np.testing.assert_allclose(p_x, g["P_x_plain"], **TOL)


@golden_params("eb")
def test_gradient_modulation_mlp_golden(golden):
  g = golden
  # The pipeline defines bias salience as 1 (README); a modulated bias would then get a zero gradient.
  gamma = {"fc1": {"kernel": g["gamma_W1"].T, "bias": np.ones_like(g["b1"])},
           "fc2": {"kernel": g["gamma_W2"].T, "bias": np.ones_like(g["b2"])}}
  grads = {"fc1": {"kernel": g["grad_W1"].T, "bias": g["grad_b1"]},
           "fc2": {"kernel": g["grad_W2"].T, "bias": g["grad_b2"]}}
  out = modulation.modulate(jax.tree.map(jnp.asarray, grads), jax.tree.map(jnp.asarray, gamma))
  np.testing.assert_allclose(out["fc1"]["kernel"], g["modgrad_W1"].T, atol=1e-5)
  np.testing.assert_allclose(out["fc2"]["kernel"], g["modgrad_W2"].T, atol=1e-5)
  np.testing.assert_allclose(out["fc1"]["bias"], g["modgrad_b1"], atol=1e-5)
  np.testing.assert_allclose(out["fc2"]["bias"], g["modgrad_b2"], atol=1e-5)


def torch_to_flax_path(name: str):
  """'encoder.layer2.shortcut.0.weight' -> ('encoder', 'layer2_0', 'shortcut_conv', 'kernel')."""
  parts = name.split(".")
  leaf = {"weight": "kernel", "bias": "bias", "running_mean": "mean", "running_var": "var"}[parts[-1]]
  mods = parts[:-1]
  if mods[0] == "head":
    return ("head", {"0": "fc1", "2": "fc2"}[mods[1]], leaf)
  out = ["encoder"]
  rest = mods[1:]
  if rest[0].startswith("layer"):
    out.append(f"{rest[0]}_0")
    rest = rest[1:]
  mod = {"shortcut.0": "shortcut_conv", "shortcut.1": "shortcut_bn"}.get(".".join(rest), rest[0])
  out.append(mod)
  if leaf == "kernel" and "bn" in mod:
    leaf = "scale"
  return tuple(out + [leaf])


def torch_to_flax_array(a):
  if a.ndim == 4:
    return a.transpose(2, 3, 1, 0)
  return a.T if a.ndim == 2 else a


def _nested(items):
  tree = {}
  for path, value in items:
    node = tree
    for p in path[:-1]:
      node = node.setdefault(p, {})
    node[path[-1]] = jnp.asarray(torch_to_flax_array(value), F32)
  return tree


def ebconv_model_and_variables(g, conv_fn=None):
  model = models.Model(models.ResNet((1, 1), (4, 6), conv_fn=conv_fn), models.ProjectionHead(6, 5, True))
  params, stats = [], []
  for key in g:
    if key.startswith("param__"):
      path = torch_to_flax_path(key[len("param__"):])
      (stats if path[-1] in ("mean", "var") else params).append((path, g[key]))
  return model, {"params": _nested(params), "batch_stats": _nested(stats)}


@golden_params("ebconv")
@pytest.mark.parametrize("conv_fn", [None, matmul_grad_conv], ids=["xla_conv", "matmul_grad_conv"])
def test_eb_resnet_golden(golden, conv_fn):
  g = golden
  model, variables = ebconv_model_and_variables(g, conv_fn)
  x = jnp.asarray(g["x"].transpose(0, 2, 3, 1), F32)
  # Jitted, as a run calls them (lookahead.py); op by op they compiled some 400 single-op programs.
  _, y = jax.jit(functools.partial(model.apply, train=False))(variables, x)
  np.testing.assert_allclose(y, g["y"], rtol=1e-5, atol=1e-6)
  gamma, p_x = jax.jit(functools.partial(salience.excitation_backprop, model))(variables, x, jnp.asarray(g["p_top"]))
  np.testing.assert_allclose(p_x, g["P_x"].transpose(0, 2, 3, 1), **TOL)
  # The file's layout: 22 parameters (ResNet stem, two blocks, projection shortcut, head), each with its gamma
  # and its modulated gradient; a file missing some would otherwise check only those it has.
  assert sum(k.startswith("gamma__") for k in g) == 22 and sum(k.startswith("modgrad__") for k in g) == 22
  assert len(jax.tree.leaves(variables["params"])) == 22
  checked = 0
  grads = []
  for key in g:
    if key.startswith("gamma__"):
      checked += 1
      name = key[len("gamma__"):]
      path = torch_to_flax_path(name)
      got = gamma
      for p in path:
        got = got[p]
      want = torch_to_flax_array(g[key])
      if name.endswith("bias"):
        want = np.zeros_like(want)  # Bias salience is never used; lasp_jax reports 0.
      np.testing.assert_allclose(got, want, err_msg=name, **TOL)
      grads.append((path, g["grad__" + name]))
  mod = modulation.modulate(_nested(grads), gamma)
  for key in g:
    if key.startswith("modgrad__"):
      path = torch_to_flax_path(key[len("modgrad__"):])
      got = mod
      for p in path:
        got = got[p]
      np.testing.assert_allclose(got, torch_to_flax_array(g[key]), atol=1e-5, err_msg=key)
      checked += 1
  assert checked == 44


def test_eb_works_on_mnist_net():
  model = models.Model(models.MnistNet(0.2), models.ProjectionHead(100, 16, False))
  x = rand(3, 28, 28, 1)
  variables = init(model, x, seed=1, train=False)
  # Jitted: op by op it compiled ~200 single-op programs (11.5 s on the 2-core CPU).
  gamma, p_x = jax.jit(functools.partial(salience.excitation_backprop, model))(variables, x, jnp.ones((3, 16)))
  assert jax.tree.structure(gamma) == jax.tree.structure(variables["params"])
  assert all(bool(jnp.all(jnp.isfinite(l)) & jnp.all(l >= 0)) for l in jax.tree.leaves(gamma))
  assert float(jnp.sum(gamma["encoder"]["conv1"]["kernel"])) > 0
  assert float(jnp.sum(jnp.abs(gamma["encoder"]["conv1"]["bias"]))) == 0


# ------------------------------------------------------------------ the R-MNIST net by hand (float64 numpy)
EPS = 1e-20


def _patches(u, k=5):
  """(N, H, W, C) -> (N, H-k+1, W-k+1, k*k*C) VALID patches in the kernel's (kh, kw, cin) order."""
  n, h, w, c = u.shape
  ho, wo = h - k + 1, w - k + 1
  out = np.empty((n, ho, wo, k, k, c))
  for i in range(k):
    for j in range(k):
      out[:, :, :, i, j, :] = u[:, i:i + ho, j:j + wo, :]
  return out.reshape(n, ho, wo, k * k * c)


def _col2im(cols, shape, k=5):
  """The adjoint of _patches: (N, Ho, Wo, k*k*C) back onto (N, H, W, C), overlaps summed."""
  n, h, w, c = shape
  ho, wo = h - k + 1, w - k + 1
  cols = cols.reshape(n, ho, wo, k, k, c)
  out = np.zeros(shape)
  for i in range(k):
    for j in range(k):
      out[:, i:i + ho, j:j + wo, :] += cols[:, :, :, i, j, :]
  return out


def _eb_layer(u, w, p, flat):
  """One affine layer's EB rule: u the layer input, w its kernel (W+ or |W|), p the salience at its output.
  Returns (salience at the input, gamma of the kernel)."""
  u = np.maximum(u, 0)
  if flat:
    z = u @ w
    p_in = u * np.maximum((p / (z + EPS)) @ w.T, 0)
    return p_in, np.sqrt(np.maximum(p_in.T @ p, 0))
  k2 = w.reshape(-1, w.shape[-1])
  z = _patches(u) @ k2
  p_in = u * np.maximum(_col2im((p / (z + EPS)) @ k2.T, u.shape), 0)
  g = _patches(p_in).reshape(-1, k2.shape[0]).T @ p.reshape(-1, p.shape[-1])
  return p_in, np.sqrt(np.maximum(g, 0)).reshape(w.shape)


def _pool_back(a, p):
  """Routes p (at the 2x2 max-pool's output) to each window's max of a (no ties in random data)."""
  n, h, w, c = a.shape
  win = a.reshape(n, h // 2, 2, w // 2, 2, c)
  hit = win == win.max(axis=(2, 4), keepdims=True)
  return (hit * p[:, :, None, :, None, :]).reshape(a.shape)


def _mnist_net_eb(params, x, p_top):
  """EB of conv-pool-relu, conv-pool-relu, fc-relu, head fc1-relu-fc2(|W|) written out layer by layer."""
  e, h = {k: {n: np.asarray(v, np.float64) for n, v in d.items()} for k, d in params["encoder"].items()}, {
      k: {n: np.asarray(v, np.float64) for n, v in d.items()} for k, d in params["head"].items()}
  conv = lambda u, l: _patches(u) @ l["kernel"].reshape(-1, l["kernel"].shape[-1]) + l["bias"]
  pool = lambda a: a.reshape(a.shape[0], a.shape[1] // 2, 2, a.shape[2] // 2, 2, a.shape[3]).max(axis=(2, 4))
  x = np.asarray(x, np.float64)
  a1 = conv(x, e["conv1"])
  h1 = np.maximum(pool(a1), 0)
  a2 = conv(h1, e["conv2"])
  h2 = np.maximum(pool(a2), 0)
  flat = h2.reshape(len(x), -1)
  a3 = flat @ e["fc"]["kernel"] + e["fc"]["bias"]
  f = np.maximum(a3, 0)
  a4 = f @ h["fc1"]["kernel"] + h["fc1"]["bias"]
  g4 = np.maximum(a4, 0)
  gamma = {}
  p, gamma["fc2"] = _eb_layer(g4, np.abs(h["fc2"]["kernel"]), np.asarray(p_top, np.float64), True)
  p, gamma["fc1"] = _eb_layer(f, np.maximum(h["fc1"]["kernel"], 0), p * (a4 > 0), True)
  p, gamma["fc"] = _eb_layer(flat, np.maximum(e["fc"]["kernel"], 0), p * (a3 > 0), True)
  p = _pool_back(a2, p.reshape(h2.shape) * (pool(a2) > 0))
  p, gamma["conv2"] = _eb_layer(h1, np.maximum(e["conv2"]["kernel"], 0), p, False)
  p = _pool_back(a1, p * (pool(a1) > 0))
  p, gamma["conv1"] = _eb_layer(x, np.maximum(e["conv1"]["kernel"], 0), p, False)
  return gamma, p


@pytest.fixture(scope="module")
def mnist_net_case():
  model = models.Model(models.MnistNet(0.1), models.ProjectionHead(50, 8, True))  # convs 2, 5; fc 50
  x = rand(4, 28, 28, 1)
  variables = init(model, x, seed=3, train=False)
  p_top = np.abs(np.asarray(rand(4, 8, seed=5))) + 0.1
  return model, variables, x, p_top


def test_eb_of_the_rmnist_net_equals_the_rule_written_out_by_hand(mnist_net_case):
  """Independent of the goldens (made for an MLP and a ResNet): the published R-MNIST net (no BatchNorm),
  conv -> max-pool -> ReLU twice, fc, head; every kernel's gamma, zero bias gamma, and the input salience."""
  model, variables, x, p_top = mnist_net_case
  gamma, p_x = jax.jit(functools.partial(salience.excitation_backprop, model))(variables, x, jnp.asarray(p_top))
  want, want_px = _mnist_net_eb(variables["params"], x, p_top)
  for name in ("conv1", "conv2", "fc"):
    np.testing.assert_allclose(gamma["encoder"][name]["kernel"], want[name], rtol=2e-4, atol=1e-7, err_msg=name)
    assert float(jnp.max(jnp.abs(gamma["encoder"][name]["bias"]))) == 0.0
  for name in ("fc1", "fc2"):
    np.testing.assert_allclose(gamma["head"][name]["kernel"], want[name], rtol=2e-4, atol=1e-7, err_msg=name)
  np.testing.assert_allclose(p_x, want_px, rtol=2e-4, atol=1e-9)
  assert np.count_nonzero(want["conv1"]) > 0 and np.count_nonzero(want["fc2"]) > 0


def test_eb_two_replicas_split_the_encoder_only_on_the_rmnist_net(mnist_net_case):
  """eb_replicas=2: encoder gamma = sqrt(G of rows 0-1) + sqrt(G of rows 2-3), each by hand; head from all rows."""
  model, variables, x, p_top = mnist_net_case
  gamma, _ = jax.jit(functools.partial(salience.excitation_backprop, model, replicas=2))(
      variables, x, jnp.asarray(p_top))
  halves = [_mnist_net_eb(variables["params"], x[i:i + 2], p_top[i:i + 2])[0] for i in (0, 2)]
  whole, _ = _mnist_net_eb(variables["params"], x, p_top)
  for name in ("conv1", "conv2", "fc"):
    np.testing.assert_allclose(gamma["encoder"][name]["kernel"], halves[0][name] + halves[1][name], rtol=2e-4,
                               atol=1e-7, err_msg=name)
  for name in ("fc1", "fc2"):
    np.testing.assert_allclose(gamma["head"][name]["kernel"], whole[name], rtol=2e-4, atol=1e-7, err_msg=name)
