"""Excitation-backprop salience and gradient modulation against the goldens."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import pytest

from lasp_jax import models, modulation, salience
from lasp_jax.conv import matmul_grad_conv
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
  model = models.ContrastiveModel(_Identity(), models.ProjectionHead(5, 4, True))
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
  model = models.ContrastiveModel(models.ResNet((1, 1), (4, 6), conv_fn=conv_fn), models.ProjectionHead(6, 5, True))
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
  model = models.ContrastiveModel(models.MnistNet(0.2), models.ProjectionHead(100, 16, False))
  x = rand(3, 28, 28, 1)
  variables = init(model, x, seed=1, train=False)
  # Jitted: op by op it compiled ~200 single-op programs (11.5 s on the 2-core CPU).
  gamma, p_x = jax.jit(functools.partial(salience.excitation_backprop, model))(variables, x, jnp.ones((3, 16)))
  assert jax.tree.structure(gamma) == jax.tree.structure(variables["params"])
  assert all(bool(jnp.all(jnp.isfinite(l)) & jnp.all(l >= 0)) for l in jax.tree.leaves(gamma))
  assert float(jnp.sum(gamma["encoder"]["conv1"]["kernel"])) > 0
  assert float(jnp.sum(jnp.abs(gamma["encoder"]["conv1"]["bias"]))) == 0
