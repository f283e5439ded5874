"""The persistent compilation cache: on by default, off with '', never overriding an existing one."""

import os
import subprocess
import sys

SCRIPT = """
import sys, jax, jax.numpy as jnp
from lasp_jax.platform import xla_cache
print(xla_cache.enable(sys.argv[1], min_compile_secs=0))
jax.jit(lambda x: jnp.tanh(x @ x.T) + 1)(jnp.ones((32, 32))).block_until_ready()
"""


def _run(path, stderr=None, **env):
  """The cache directory in use (stdout's last line); ``stderr``: a list that receives stderr's lines."""
  clean = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")} | env
  out = subprocess.run([sys.executable, "-c", SCRIPT, path], env=clean, capture_output=True, text=True,
                       check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
  if stderr is not None:
    stderr.extend(out.stderr.strip().splitlines())
  return out.stdout.strip().splitlines()[-1]


def test_cache_is_written_where_asked(tmp_path):
  cache = tmp_path / "xla"
  assert _run(str(cache)) == str(cache)
  assert any(cache.iterdir()), "no compiled program was stored"


def test_empty_path_leaves_it_off(tmp_path):
  assert _run("") == "None"


def test_an_existing_setting_wins(tmp_path):
  env_dir = tmp_path / "from_env"
  assert _run(str(tmp_path / "flag"), JAX_COMPILATION_CACHE_DIR=str(env_dir)) == str(env_dir)
  assert not (tmp_path / "flag").exists()


def test_a_directory_that_cannot_be_made_leaves_it_off_with_one_warning(tmp_path):
  (tmp_path / "file").write_text("")
  err = []
  assert _run(str(tmp_path / "file" / "xla"), stderr=err) == "None"
  # the last line: a machine's JAX may log a line of its own before it
  assert err[-1:] == [f"warning: compilation cache off: cannot create {tmp_path}/file/xla (Not a directory)"]
  assert sum("compilation cache" in line for line in err) == 1
