"""The README's "use the pieces in your own JAX code" example, run as written (so it cannot rot)."""

import ast
import importlib.util
import pathlib
import re

import numpy as np
import pytest
import tomllib

import lasp_jax.method.mask_search  # noqa: F401  (a submodule imported first must not shadow an export of that name)

# Asserts outcomes of training: CI checks it under a second XLA:CPU code path too (.ci/run).
pytestmark = pytest.mark.trajectory

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
  """The python block under the README's "Use the pieces" heading."""
  text = README.read_text()
  section = text[text.index("## Use the pieces"):]
  return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs_and_does_what_it_says():
  scope = {}
  exec(compile(readme_example(), "README.md", "exec"), scope)  # pylint: disable=exec-used
  # Training lowered the SupCon + SD loss of the toy model.
  assert scope["losses"][-1] < scope["losses"][0]
  # The search kept the 4 informative dims of the past embeddings, not the noise dims.
  mask = np.asarray(scope["found"].mask)
  assert mask[:4].all() and not mask[4:].any()
  # GM: a weight whose salience is >= 1 gets no gradient step; the bias is not modulated.
  assert np.allclose(scope["frozen_update"]["Dense_0"]["kernel"], 0.0)
  assert not np.allclose(scope["frozen_update"]["Dense_0"]["bias"], 0.0)


def test_the_package_declares_its_console_script_and_dependencies():
  meta = tomllib.loads((README.parent / "pyproject.toml").read_text())
  module, func = meta["project"]["scripts"]["lasp-jax"].split(":")
  # Read, not imported: importing the CLI module defines its absl flags, which other modules of a test process
  # (experiments.raw_pixels) define too.
  tree = ast.parse(pathlib.Path(importlib.util.find_spec(module).origin).read_text())
  assert func in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
  deps = " ".join(meta["project"]["dependencies"])
  for name in ("jax", "flax", "optax", "orbax-checkpoint", "ml_collections", "mlxtend"):
    assert name in deps
  package = pathlib.Path(__file__).resolve().parents[1] / "lasp_jax"
  folders = {f"lasp_jax.{p.parent.name}" for p in package.glob("*/__init__.py")}
  assert set(meta["tool"]["setuptools"]["packages"]) == {"lasp_jax", *folders}  # every folder is installed
