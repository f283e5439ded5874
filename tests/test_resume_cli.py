"""Resume after SIGKILL (mid-task, mid-probe) equals an uninterrupted run; CLI errors."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# One xdist worker for this module (`--dist loadgroup`): its module fixture, a training run, is then built once.
pytestmark = pytest.mark.xdist_group("resume_cli")

# sd_gm: the resumed run must also restore the SD mask and the GM salience held in the optimizer state.
ARGS = ["--config=configs/tiny.py", "--config.data.num_tasks=2", "--config.train.epochs_first=2",
        "--config.train.epochs=1", "--config.train.checkpoint_every_steps=8", "--config.method=sd_gm"]
TIMING = {"wall_time_s", "search_s", "eb_s", "timing", "train_s", "boundary_s", "probe_s"}


def main(workdir, *extra, fault=None):
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  env.pop("LASP_FAULT", None)
  if fault:
    env["LASP_FAULT"] = fault
  return subprocess.run([sys.executable, "-m", "lasp_jax.main", f"--workdir={workdir}", *ARGS, *extra],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def strip_timing(obj):
  if isinstance(obj, dict):
    return {k: strip_timing(v) for k, v in obj.items() if k not in TIMING}
  if isinstance(obj, list):
    return [strip_timing(v) for v in obj]
  return obj


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  wd = tmp_path_factory.mktemp("uninterrupted")
  out = main(wd)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads((wd / "results.json").read_text())


# mid-task 1 (after the boundary set the mask and gamma), at the probe, and at a task-end checkpoint
# before the boundary work (memory update, past snapshot, search, EB).
@pytest.mark.parametrize("fault", ["step:1:0:8", "probe:1", "boundary:1"])
def test_killed_run_resumes_to_identical_results(reference, tmp_path, fault):
  expected = reference
  killed = main(tmp_path, fault=fault)
  assert killed.returncode == -9  # SIGKILL
  assert not (tmp_path / "results.json").exists()
  resumed = main(tmp_path)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "resuming" in resumed.stderr
  got = json.loads((tmp_path / "results.json").read_text())
  assert strip_timing(got) == strip_timing(expected)


def test_a_changed_config_is_refused_unless_forced_and_never_restarts(reference, tmp_path):
  assert main(tmp_path, fault="boundary:1").returncode == -9  # task 0 finished and checkpointed
  refused = main(tmp_path, "--config.train.lr=0.2")
  assert refused.returncode == 2
  assert "differs in: train.lr" in refused.stderr and "Traceback" not in refused.stderr
  forced = main(tmp_path, "--config.resume=force", "--config.train.lr=0.2")
  assert forced.returncode == 0 and "resuming" in forced.stderr
  got = json.loads((tmp_path / "results.json").read_text())
  assert got["curves"][:2] == reference["curves"][:2]  # task 0 kept from the checkpoint
  assert got["curves"][2:] != reference["curves"][2:]  # task 1 trained at the new lr
  # never: the finished run (another config) is ignored and the same seed retrains to the same results.json.
  fresh = main(tmp_path, "--config.resume=never")
  assert fresh.returncode == 0 and "resuming" not in fresh.stderr
  assert strip_timing(json.loads((tmp_path / "results.json").read_text())) == strip_timing(reference)


@pytest.mark.parametrize("args,message", [
    (["--config.trian.lr=1"], "trian"),
    (["--config=configs/nonexistent.py"], "nonexistent.py"),
    (["--config.dataset=cifar100"], "unknown dataset 'cifar100'"),
    (["--config.dataset=cifar10", "--config.data.data_dir=/nonexistent/dir"], "cifar-10-batches-bin"),
    (["--config.model.name=vgg"], "unknown model.name 'vgg'"),
    (["--config.model.conv_backward=foo"], "unknown model.conv_backward 'foo'"),
    (["--config.train.lr=-1"], "train.lr must be > 0, got -1"),
    (["--config.train.momentum=1.0"], "train.momentum must be in [0, 1), got 1.0"),
    (["--config.method=joint", "--config.train.schedule=cosine"], "unknown train.schedule 'cosine'"),
    (["--config.data.scenario=domain", "--config.data.rotation_angles=(10.0,20.0)"],
     "data.rotation_angles has 2 angles for 5 tasks"),
])
def test_cli_errors_are_one_clear_line(tmp_path, args, message):
  out = subprocess.run([sys.executable, "-m", "lasp_jax.main", "--config=configs/tiny.py",
                        f"--workdir={tmp_path}", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode == 2
  assert message in out.stderr and "Traceback" not in out.stderr
  assert len(out.stderr.strip().splitlines()) == 1, out.stderr
  assert not (tmp_path / "results.json").exists() and not (tmp_path / "checkpoints").exists()
