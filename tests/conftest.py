"""Shared test fixtures: golden-file discovery and small helpers."""

import functools
import glob
import os
import pathlib

import numpy as np
import pytest

from lasp_jax.platform import cpu_kernels, host_memory

REPO = pathlib.Path(__file__).resolve().parents[1]
host_memory.keep_freed_memory()  # as lasp_jax.main does, before any test starts JAX's backend

# Under pytest-xdist (the README's `-n 2`) each worker runs XLA:CPU's Eigen kernels on one thread: two
# workers with two threads each oversubscribed the two cores (suite 10 min 30 s -> 7 min 54 s, user CPU
# 19.9 -> 14.8 min; BENCHMARKS.md). The programs are the same; only Eigen's split of the work
# over threads changes, i.e. float summation order. Set before any test imports jax; subprocesses inherit it
# (and those that import this module, inheriting PYTEST_XDIST_WORKER too, find it set already).
# LLVM's -O1 for XLA:CPU's kernels: about half the suite's CPU time is compiling its tiny programs, and -O1 cuts a
# train chunk's compile ~10 % (BENCHMARKS.md). It leaves XLA's own passes, and so the arithmetic, as they are: a
# 2-task tiny run's results.json at -O1 equals the default's bit for bit.
# XLA:CPU's older loop emitters for elementwise fusions instead of its MLIR fusion emitters: they compile faster
# (the suite's user CPU -9 to -17 % back to back, BENCHMARKS.md). The MLP's results are the same; a conv net's
# move in float32 rounding. CI runs the trajectory tests once more with the fusion emitters on (.ci/run): a flag of
# the same name already in XLA_FLAGS is kept.
# Each program's machine code in one piece, not split for threads to compile in parallel: two workers already fill
# the two cores, and the split's threads only contend with them (the suite 341.8 -> 293.5 s, user CPU -15 %, back to
# back, BENCHMARKS.md). It changes how the code is compiled, not what it computes: the tiny run's results.json and
# the init program's bits (test_train_state) are the same.
WORKER_FLAGS = ("--xla_cpu_multi_thread_eigen=false", "--xla_backend_optimization_level=1",
                "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")


def xla_flags(*flags: str) -> str:
  """XLA_FLAGS for a subprocess: ``flags`` after this process's own (the workers' flags above)."""
  return " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()


if os.environ.get("PYTEST_XDIST_WORKER"):
  cpu_kernels.add_xla_flags(*WORKER_FLAGS)


def golden_dir() -> pathlib.Path:
  """Directory of the golden vectors: $LASP_GOLDEN_DIR (e.g. held-out seeds) or tests/golden."""
  return pathlib.Path(os.environ.get("LASP_GOLDEN_DIR", REPO / "tests" / "golden"))


def golden_files(family: str) -> list[str]:
  """Every ``<family>_seed*.npz`` in the golden directory (fails if none)."""
  files = sorted(glob.glob(str(golden_dir() / f"{family}_seed*.npz")))
  if not files:
    raise FileNotFoundError(f"no {family}_seed*.npz in {golden_dir()} (set LASP_GOLDEN_DIR)")
  return files


class MissingGolden(dict):
  """Stands in for an absent golden family: the first read fails the test (never skips or xfails)."""

  def __init__(self, message: str):
    super().__init__()
    self.message = message

  def __getitem__(self, key):
    pytest.fail(self.message)


def golden_params(family: str):
  """pytest parametrization over every seed file of a golden family; each id starts with "golden-".

  A missing directory or family gives one failing test per function (so CI
  cannot pass without the goldens), not a collection error.
  """
  try:
    files = golden_files(family)
  except FileNotFoundError as e:
    return pytest.mark.parametrize("golden", [MissingGolden(str(e))], ids=[f"golden-{family}-missing"])
  return pytest.mark.parametrize("golden", [dict(np.load(f)) for f in files],
                                 ids=[f"golden-{os.path.basename(f)}" for f in files])


# Test data and parameters without eager jax.random or eager Flax init: each eager jax.random call compiles
# a threefry program of its own per shape (about 1 s each on the 2-core AMD EPYC; 104 such programs took
# 118 s of the suite's compile time, BENCHMARKS.md), and an eager init one per parameter shape.
# numpy draws instead, and one jitted init per model (equal models share it through the compilation cache).
# jax is imported inside the helpers: this module sets XLA_FLAGS before any test imports it.

def randn(*shape, seed=0):
  """Standard-normal float32 test data."""
  import jax.numpy as jnp  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))


def rand(*shape, seed=0):
  """Uniform [0, 1) float32 test data."""
  import jax.numpy as jnp  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  return jnp.asarray(np.random.default_rng(seed).random(shape, dtype=np.float32))


def init(module, x, seed=0, **kwargs):
  """``module.init(PRNGKey(seed), x, **kwargs)``, compiled as one program (at the train state's -O1)."""
  import jax  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)

  from lasp_jax.loop.train_state import INIT_COMPILER_OPTIONS  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  return jax.jit(functools.partial(module.init, **kwargs),
                 compiler_options=INIT_COMPILER_OPTIONS.get(jax.default_backend()))(jax.random.PRNGKey(seed), x)


def run_cli(workdir, *args, fault=None):
  """``python -m lasp_jax.main --workdir=WORKDIR ARGS`` in a subprocess; ``fault`` (LASP_FAULT) kills it there."""
  import subprocess  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  import sys  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  env.pop("LASP_FAULT", None)
  if fault:
    env["LASP_FAULT"] = fault
  return subprocess.run([sys.executable, "-m", "lasp_jax.main", f"--workdir={workdir}", *args],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def cli_in_process(module: str, *args):
  """``python -m MODULE ARGS`` in the repository, run inside this worker (runpy, as ``-m`` does) as a
  CompletedProcess (exit code, stdout, stderr): no new Python importing JAX and tracing again (~3 s each). The
  flags it defined are removed after, so another command of the same flag names can run next; $XLA_FLAGS (which
  the command line may extend for the process it would start) is restored."""
  import contextlib  # noqa: PLC0415
  import io  # noqa: PLC0415
  import runpy  # noqa: PLC0415
  import subprocess  # noqa: PLC0415
  import sys  # noqa: PLC0415
  import warnings  # noqa: PLC0415

  from absl import app, flags  # noqa: PLC0415
  app.define_help_flags()  # absl's own, defined once a process: kept
  before, argv, cwd, xla = set(flags.FLAGS), sys.argv, os.getcwd(), os.environ.get("XLA_FLAGS")
  out, err, code = io.StringIO(), io.StringIO(), 0
  sys.argv = [module, *args]
  try:
    os.chdir(REPO)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
      warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)  # imported already: fine
      runpy.run_module(module, run_name="__main__", alter_sys=True)
  except SystemExit as e:
    code = e.code or 0
  finally:
    os.chdir(cwd)
    sys.argv = argv
    if xla is None:
      os.environ.pop("XLA_FLAGS", None)
    else:
      os.environ["XLA_FLAGS"] = xla
    flags.FLAGS.unparse_flags()
    for name in set(flags.FLAGS) - before:
      delattr(flags.FLAGS, name)
  return subprocess.CompletedProcess([module, *args], code, out.getvalue(), err.getvalue())


def strip_timing(obj):
  """results.json without its wall-clock figures and provenance (lasp_jax.report.without_volatile)."""
  from lasp_jax import report  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  return report.without_volatile(obj)


def tiny_config(**overrides):
  """configs/tiny.py with dotted-key overrides, e.g. tiny_config(**{"data.num_tasks": 2}); no pictures unless
  asked for (matplotlib costs ~2 s a run)."""
  from configs import tiny  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  from lasp_jax.config_lib import override  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  return override(tiny.get_config(), **{"pictures": False, **overrides})


def two_tasks(**overrides):
  """The tiny config's 2-task run (2 epochs, then 1) with overrides: the settings most train tests share, so
  that they share its train programs."""
  return tiny_config(**{"data.num_tasks": 2, "train.epochs_first": 2, "train.epochs": 1, **overrides})


# The loop's mechanics (chunks and their padding, tail steps, resume, seeds, method registries, boundaries) do not
# depend on the network: their tests train this small MLP encoder, whose train programs compile in half the conv
# net's time (a tiny chunk 2.9 against 5.8 s on the 2-core AMD EPYC) and run several times faster.
MLP = {"model.name": "mlp", "model.hidden": (64,)}


def mlp_two_tasks(**overrides):
  """:func:`two_tasks` with the :data:`MLP` encoder: the runs of tests of the loop's mechanics."""
  return two_tasks(**{**MLP, **overrides})


class Run:
  """A test's handle on one run: its context and carry (lasp_jax.loop.context) built by train.build, and the library's
  functions on them. Reads of a carry or context field go to them (the carry's first); ``state``, ``past``,
  ``data`` and ``rs`` are written to the carry."""
  _CARRY = ("rs", "state", "past", "data", "writer")

  def __init__(self, config, workdir, devices=None, on_task_end=None):
    from lasp_jax import train  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
    ctx, carry = train.build(config, workdir, devices)
    object.__setattr__(self, "ctx", ctx)
    object.__setattr__(self, "carry", carry)
    object.__setattr__(self, "on_task_end", on_task_end)

  def __getattr__(self, name):
    return getattr(self.carry if hasattr(self.carry, name) else self.ctx, name)

  def __setattr__(self, name, value):
    if name in self._CARRY:
      setattr(self.carry, name, value)
    elif name == "chunk_fn":  # a test's stand-in for the compiled chunk (Context.chunk_fn is cached there)
      self.ctx.__dict__["chunk_fn"] = value
    else:
      object.__setattr__(self, name, value)

  def start(self):
    from lasp_jax import train  # noqa: PLC0415
    object.__setattr__(self, "carry", train.resume(self.ctx, self.carry))

  def run(self) -> dict:
    from lasp_jax import train  # noqa: PLC0415
    self.start()
    return train.run(self.ctx, self.carry, on_task_end=self.on_task_end)

  def run_task(self, t: int) -> None:
    from lasp_jax import train  # noqa: PLC0415
    train.run_task(self.ctx, self.carry, t, self.on_task_end)

  def finish(self) -> dict:
    from lasp_jax import train  # noqa: PLC0415
    return train.finish(self.ctx, self.carry)

  def maybe_restore(self) -> bool:
    from lasp_jax.loop import context  # noqa: PLC0415
    restored = context.restore(self.ctx, self.carry)
    if restored:
      object.__setattr__(self, "carry", restored)
    return restored is not None

  def epoch_plan(self, t: int):
    from lasp_jax.loop import epochs  # noqa: PLC0415
    return epochs.epoch_plan(self.ctx, self.carry, t)

  def epoch_chunks(self, plan):
    from lasp_jax.loop import epochs  # noqa: PLC0415
    return epochs.epoch_chunks(self.ctx.config, plan)

  def readout_inputs(self):
    from lasp_jax import train  # noqa: PLC0415
    return train.readout_inputs(self.ctx, self.carry)


def placed_chunk(run, steps_per_call=1):
  """The first chunk of ``run``'s first epoch and a past model (its weights x 0.9), on the run's mesh as
  ``epochs.OneRun`` places them: a chunk of the run's own length is then the program its runs
  compiled (arrays placed otherwise give another program, ~6 s to compile here)."""
  import jax  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)

  from lasp_jax.loop import steps  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  from lasp_jax.method import pools  # noqa: PLC0415
  pool = pools.training_pool(run.stream, run.memory, 0)
  b = steps.epoch_batches(pool, run.config.train.batch_size, steps_per_call, np.random.default_rng(0))
  chunk = jax.device_put(steps.Batch(*[f[0] for f in b]), run.batch_sharding)
  return chunk, jax.device_put(past_model(run), run.replicated)


def past_model(run):
  """A past model for ``run``'s step that differs from its network: its weights and BN statistics x 0.9."""
  import jax  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)

  from lasp_jax.loop import steps  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  return steps.PastModel(*jax.tree.map(lambda x: x * 0.9, (run.state.params, run.state.batch_stats)))


@pytest.fixture(scope="session", autouse=True)
def _compilation_cache(tmp_path_factory):
  """Share compiled programs between the many small runs of the suite."""
  import jax  # noqa: PLC0415  (jax after this module has set XLA_FLAGS for the workers)
  # One cache for every xdist worker and for the subprocesses the tests start.
  cache = tmp_path_factory.getbasetemp().parent / "jax_cache"
  cache.mkdir(exist_ok=True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache)
  # Every program, however quick to compile: the suite's many runs compile the same small
  # programs again and again (a tiny run in a new process: 12.0 s with the 0.5 s floor, 9.4 s without).
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  jax.config.update("jax_compilation_cache_dir", str(cache))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  yield
