"""Resume after SIGKILL (mid-task, mid-probe) equals an uninterrupted run; CLI errors."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.conftest import cli_in_process, run_cli, strip_timing

REPO = pathlib.Path(__file__).resolve().parents[1]

# One xdist worker for this module (`--dist loadgroup`): its module fixture, a training run, is then built once.
pytestmark = pytest.mark.xdist_group("resume_cli")

# sd_gm: the resumed run must also restore the SD mask and the GM salience held in the optimizer state.
# No raw-pixel baseline: a fit of the probe's rows (the probe checks those already) that took ~3 s in each of
# the four processes that reach the end. The MLP encoder of the loop's mechanics tests (conftest.MLP).
ARGS = ["--config=configs/tiny.py", "--config.data.num_tasks=2", "--config.train.epochs_first=2",
        "--config.train.epochs=1", "--config.train.checkpoint_every_steps=8", "--config.method=sd_gm",
        "--config.eval.raw_pixels=False", "--config.model.name=mlp", "--config.model.hidden=(64,)"]


def main(workdir, *extra, fault=None):
  """The command in a process of its own where a fault kills it (SIGKILL), else inside this worker."""
  if fault:
    return run_cli(workdir, *ARGS, *extra, fault=fault)
  return cli_in_process("lasp_jax.main", f"--workdir={workdir}", *ARGS, *extra)


@pytest.fixture(scope="module")
def after_task0(tmp_path_factory):
  """A run killed at task 1's boundary: task 0 finished and checkpointed, before the boundary work
  (memory update, past snapshot, search, EB). Tests resume copies of it."""
  wd = tmp_path_factory.mktemp("after_task0")
  killed = main(wd, fault="boundary:1")
  assert killed.returncode == -9, killed.stderr[-3000:]  # SIGKILL
  assert not (wd / "results.json").exists()
  return wd


@pytest.fixture(scope="module")
def changed_config(after_task0, tmp_path_factory):
  """On a copy of the killed run, with another train.lr: refused, then forced to the end, then
  ``resume=never`` in the same folder. {name: (process, results.json after it)}."""
  wd = tmp_path_factory.mktemp("changed_config")
  shutil.copytree(after_task0, wd, dirs_exist_ok=True)
  out = {}
  for name, extra in [("refused", ["--config.train.lr=0.2"]),
                      ("forced", ["--config.resume=force", "--config.train.lr=0.2"]),
                      ("never", ["--config.resume=never"])]:
    proc = main(wd, *extra)
    out[name] = proc, json.loads((wd / "results.json").read_text()) if (wd / "results.json").exists() else None
  return out


@pytest.fixture(scope="module")
def reference(changed_config):
  """The uninterrupted run: ``resume=never`` trains from scratch, ignoring the forced run's checkpoints and
  results. (That it ignored them is checked below: it differs from the forced run, and a run resumed
  three times over must equal it.)"""
  proc, results = changed_config["never"]
  assert proc.returncode == 0 and "resuming" not in proc.stderr, proc.stderr[-3000:]
  return results


def test_a_run_killed_at_each_fault_point_resumes_to_identical_results(reference, after_task0, tmp_path):
  # One run, killed at every fault point in the order it meets them and resumed each time: at the
  # boundary (the fixture), mid-task 1 (after the boundary set the mask and gamma), at the probe. Any
  # inexact resume carries into the finished run, which must equal the uninterrupted one.
  shutil.copytree(after_task0, tmp_path, dirs_exist_ok=True)
  for fault in ["step:1:0:8", "probe:1", None]:
    out = main(tmp_path, fault=fault)
    assert "resuming" in out.stderr, (fault, out.stderr[-3000:])
    if fault:
      assert out.returncode == -9, (fault, out.stderr[-3000:])
      assert not (tmp_path / "results.json").exists()
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.loads((tmp_path / "results.json").read_text())
  assert strip_timing(got) == strip_timing(reference)


def test_a_changed_config_is_refused_unless_forced_and_never_restarts(changed_config, reference):
  refused, nothing = changed_config["refused"]
  assert refused.returncode == 2 and nothing is None
  assert "differs in: train.lr" in refused.stderr and "Traceback" not in refused.stderr
  forced, got = changed_config["forced"]
  assert forced.returncode == 0 and "resuming" in forced.stderr
  assert got["curves"][:2] == reference["curves"][:2]  # task 0 kept from the checkpoint
  assert got["curves"][2:] != reference["curves"][2:]  # task 1 trained at the new lr
  # never: the finished run (another config) was not resumed: the same seed retrained task 1 at the old lr.
  assert strip_timing(got) != strip_timing(reference)


@pytest.mark.parametrize("args,message", [
    (["--config.trian.lr=1"], "error: unknown config key trian.lr; the nearest: train.lr"),
    (["--config.methd=sd"], "error: unknown config key methd; the nearest: method"),
    (["--config.method=icarl", "--config.data.scenario=domain"],
     "error: method 'icarl' is defined for data.scenario class, not 'domain'"),
    (["--config.method=agem", "--config.boundaries=detected"],
     "error: method 'agem' writes its memory where each task ends: it needs boundaries='given'"),
    (["--config=configs/nonexistent.py"], "error: cannot load --config: no such file 'configs/nonexistent.py'"),
    (["--config.dataset=cifar100"], "unknown dataset 'cifar100'"),
    (["--config.dataset=cifar10", "--config.data.data_dir=/nonexistent/dir"], "cifar-10-batches-bin"),
    (["--config.model.name=vgg"], "unknown model.name 'vgg'"),
    (["--config.model.conv_backward=foo"], "unknown model.conv_backward 'foo'"),
    (["--config.train.lr=-1"], "train.lr must be > 0, got -1"),
    (["--config.train.momentum=1.0"], "train.momentum must be in [0, 1), got 1.0"),
    (["--config.method=joint", "--config.train.schedule=cosine"], "unknown train.schedule 'cosine'"),
    (["--config.data.scenario=domain", "--config.data.rotation_angles=(10.0,20.0)"],
     "data.rotation_angles has 2 angles for 5 tasks"),
    (["--config.boundaries=detected", "--config.method=joint"], "method 'joint' trains on every earlier task's data"),
    (["--config.boundaries=detected", "--config.num_seeds=2", "--config.seeds_mode=vmap"],
     "boundaries='detected' with seeds_mode='vmap'"),
    (["--config.boundaries=sometimes"], "unknown boundaries 'sometimes'"),
    (["--config.preset=published", "--config.method=sdd"], "error: unknown method 'sdd'; expected one of"),
])
def test_cli_errors_are_one_clear_line(tmp_path, args, message):
  out = cli_in_process("lasp_jax.main", "--config=configs/tiny.py", f"--workdir={tmp_path}", *args)
  assert out.returncode == 2
  assert message in out.stderr and "Traceback" not in out.stderr
  assert len(out.stderr.strip().splitlines()) == 1, out.stderr
  assert not (tmp_path / "results.json").exists() and not (tmp_path / "checkpoints").exists()


def test_a_config_file_that_fails_is_one_clear_line(tmp_path):
  (tmp_path / "broken.py").write_text("def get_config():\n  return undefined_name\n")
  out = cli_in_process("lasp_jax.main", f"--config={tmp_path / 'broken.py'}", f"--workdir={tmp_path / 'run'}")
  assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
  assert out.stderr.strip() == "error: cannot use the --config flag: name 'undefined_name' is not defined"
  assert not (tmp_path / "run").exists()


def test_a_bad_config_value_is_reported_before_jax_loads(tmp_path):
  # main.py checks the config with config_lib, which imports no jax: a bad value costs ~0.4 s, not ~3.4 s.
  script = ("import sys, runpy\n"
            f"sys.argv = ['main', '--config=configs/tiny.py', '--workdir={tmp_path}', '--config.train.lr=-1']\n"
            "try:\n  runpy.run_module('lasp_jax.main', run_name='__main__')\n"
            "except SystemExit as e:\n  print(e.code, 'jax' in sys.modules, 'lasp_jax.train' in sys.modules)\n")
  out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert out.stdout.split() == ["2", "False", "False"], (out.stdout, out.stderr)
  assert out.stderr.strip() == "error: train.lr must be > 0, got -1.0"


def test_help_lists_the_flags_a_user_needs_with_an_example(tmp_path):
  out = cli_in_process("lasp_jax.main", f"--workdir={tmp_path}", "--help")
  assert out.returncode == 0 and out.stdout.startswith("usage: lasp-jax --config=FILE"), out.stderr
  for flag in ("--config=FILE", "--config.KEY=VALUE", "--workdir=DIR", "--baselines", "--config.num_seeds=N",
               "--config.preset=published", "--compile_cache", "example: lasp-jax --config=configs/mnist5k.py"):
    assert flag in out.stdout, flag
  from lasp_jax.method import registry  # noqa: PLC0415
  listed = out.stdout.split("--config.method=NAME")[1].split("--config.num_seeds")[0]
  assert all(f" {name}," in listed or f" {name}\n" in listed for name in registry.METHODS), listed
  assert not (tmp_path / "results.json").exists()


def test_a_setting_the_data_refuses_leaves_no_workdir_behind(tmp_path):
  from lasp_jax import train  # noqa: PLC0415
  from lasp_jax.errors import ConfigError  # noqa: PLC0415
  from tests.conftest import tiny_config  # noqa: PLC0415
  with pytest.raises(ConfigError, match="10 classes cannot be split into 7 equal tasks"):
    train.build(tiny_config(**{"data.num_tasks": 7}), tmp_path / "new")
  assert not (tmp_path / "new").exists()
