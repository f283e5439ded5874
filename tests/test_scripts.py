"""Every command-line script reports bad input as one line and exit code 2 (errors.run_app), before it writes."""

import ast
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for d in ("experiments", "perf", "lasp_jax") for p in (REPO / d).rglob("*.py")
                 if "tests" not in p.parts and 'if __name__ == "__main__":' in p.read_text())


def _calls(tree, name):
  return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
          and n.func.attr == name]


def test_every_script_enters_through_run_app_and_bounds_its_integer_flags():
  entered = []
  for path in SCRIPTS:
    tree = ast.parse(path.read_text())
    rel = path.relative_to(REPO)
    # absl's own app.run prints a bad flag as a usage page and exits 1, and an error raised in main as a traceback
    assert not [c for c in _calls(tree, "run") if getattr(c.func.value, "id", "") == "app"], rel
    if _calls(tree, "run_app"):
      entered.append(str(rel))
    for call in _calls(tree, "DEFINE_integer"):
      # --seeds=0 ran nothing and then rewrote a study's tables from no runs
      assert any(k.arg == "lower_bound" for k in call.keywords), (rel, ast.unparse(call)[:80])
  # the scripts that take flags (a plain module with a __main__ guard and no flags may do without)
  for name in ("lasp_jax/main.py", "experiments/threats.py", "experiments/lasp_gain.py", "perf/benchmark.py",
               "lasp_jax/tools/prepare.py"):
    assert name in entered, name


SCRIPT = """
import sys
from absl import app, flags
from ml_collections import config_flags
from lasp_jax import errors
flags.DEFINE_integer("seeds", 3, "", lower_bound=1)
config_flags.DEFINE_config_file("cfg", None, "")
def main(argv):
  if flags.FLAGS.seeds == 2:
    raise errors.ConfigError("two seeds\\nare refused")
  if flags.FLAGS.seeds == 3:
    raise app.UsageError("three seeds are refused too")
  print("ran", flags.FLAGS.seeds)
errors.run_app(main)
"""


@pytest.mark.parametrize("arg,code,out,err", [
    ("--seeds=4", 0, "ran 4", ""),
    ("--seeds=0", 2, "", "error: flag --seeds=0: 0 is not a positive integer"),
    ("--sedes=4", 2, "", "error: Unknown command line flag 'sedes'. Did you mean: seeds ?"),
    ("--seeds=2", 2, "", "error: two seeds are refused"),
    ("--seeds=3", 2, "", "error: three seeds are refused too"),
    # config_flags would defer this one to the config's first use in main, and raise there
    ("--cfg=configs/nope.py", 2, "", "error: cannot load --cfg: no such file 'configs/nope.py'"),
    ("--cfg=configs/tiny.py", 2, "", "error: three seeds are refused too"),  # loaded: main ran
])
def test_run_app_says_a_bad_flag_or_a_refusal_in_one_line_with_exit_2(arg, code, out, err):
  got = subprocess.run([sys.executable, "-c", SCRIPT, arg], cwd=REPO, capture_output=True, text=True, timeout=60)
  assert (got.returncode, got.stdout.strip(), got.stderr.strip()) == (code, out, err)


def test_importing_the_library_starts_no_jax_backend():
  """A module-level jnp value starts JAX's backend at import: jax.distributed.initialize (multi-process) must come
  before that, and a GPU job's second process died there when another held the device."""
  scripts = [".".join(p.relative_to(REPO).with_suffix("").parts) for p in SCRIPTS if p.parts[-2:-1] != ("perf",)]
  code = ("import importlib, pkgutil, sys, lasp_jax\nfrom jax._src import xla_bridge\n"
          "names = [m.name for m in pkgutil.walk_packages(lasp_jax.__path__, 'lasp_jax.')]\n"
          "for name in names:\n  if name not in sys.argv[1:]: importlib.import_module(name)\n"
          "print(len(names), xla_bridge.backends_are_initialized())")
  out = subprocess.run([sys.executable, "-c", code, *scripts], capture_output=True, text=True, timeout=300, cwd=REPO)
  assert out.returncode == 0, out.stderr[-2000:]
  count, started = out.stdout.split()
  assert int(count) > 40 and started == "False"
