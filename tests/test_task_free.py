"""Task-free streams (boundaries='detected'): detectors, their scores, runs against given boundaries, resume."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax import config_lib
from lasp_jax.data import detectors, streams
from lasp_jax.loop import checkpoint, run_state, steps
from tests.conftest import MLP, Run, placed_chunk, strip_timing, tiny_config, two_tasks

pytestmark = [pytest.mark.xdist_group("task_free"), pytest.mark.trajectory]

# The centred head on the MLP encoder: detection and its resume are the loop's mechanics (conftest.MLP); on the
# conv net this file and the queue's Domain-IL dry run took 99 s of CPU against 85 s (2-core AMD EPYC).
DOMAIN = {"data.scenario": "domain", "data.num_tasks": 3, "eval.raw_pixels": False, "eval.every_task": False,
          "model.head_center": True, **MLP}
SAME = ("acc_matrix", "final", "curves", "health")


def test_scores_hand_values():
  # Boundaries at 10 and 30, one epoch = 5 steps: 10 and 33 match (delays 0 and 3), 50 is a false positive.
  s = detectors.scores([10, 30], [5, 5], [10, 33, 50])
  assert (s["precision"], s["recall"], s["mean_delay_steps"]) == (2 / 3, 1.0, 1.5)
  # Before the boundary or past its window: no match.
  s = detectors.scores([10, 30], [5, 5], [9, 36])
  assert (s["precision"], s["recall"], s["mean_delay_steps"]) == (0.0, 0.0, None)
  # Two detections of one boundary: one matches, the other is a false positive.
  assert detectors.scores([10], [5], [10, 12])["precision"] == 0.5
  assert detectors.scores([10], [5], [])["recall"] == 0.0
  # The window's edges: b + w still matches (delay w), b + w + 1 no longer does.
  assert detectors.scores([10], [5], [15])["mean_delay_steps"] == 5.0
  assert detectors.scores([10], [5], [16])["recall"] == 0.0


def test_label_novelty_and_mean_shift_by_hand():
  assert detectors.label_novelty(labels=[2, 3], seen=[0, 1, 2])
  assert not detectors.label_novelty(labels=[1, 1, 0], seen=[0, 1, 2])
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=(512, 64)), rng.normal(size=(512, 64))
  assert detectors.mean_shift(a, a) == 0.0
  assert 0.7 < detectors.mean_shift(a, b) < 1.4  # one distribution: about 1
  # Means 0.5 std apart: 256 * 0.25 / (pooled var 1.06) = 60 by hand.
  np.testing.assert_allclose(detectors.mean_shift(a, b + 0.5), 60.0, rtol=0.15)
  # Two features, one constant in both batches (left out): the other's means differ by 2, pooled variance 1,
  # n_a n_b / (n_a + n_b) = 1 -> 4.
  x, y = np.array([[0.0, 5.0], [2.0, 5.0]]), np.array([[2.0, 5.0], [4.0, 5.0]])
  np.testing.assert_allclose(detectors.mean_shift(x, y), 4.0)


def test_slot_tables_come_in_few_sizes_so_given_and_detected_runs_share_their_train_program(tmp_path):
  assert [run_state.table_size(n) for n in (1, 3, 8, 9, 20, 480)] == [8, 8, 8, 16, 32, 512]
  runs = [Run(tiny_config(**DOMAIN, **over), tmp_path / str(i))
          for i, over in enumerate([{}, {"boundaries": "detected"}])]
  assert [r.stream.slot_capacity for r in runs] == [3, 6]  # 3 tasks; 3 tasks x 2 epochs of passes
  runs[1].rs.slots = [[0, 0], [2, 1]]  # slot 1: domain 2, tag 1
  angles, tags = runs[1].rs.slot_tables(runs[1].stream)
  want = np.float32([runs[1].stream.angles[0], runs[1].stream.angles[2], 0, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(angles, want)
  np.testing.assert_array_equal(tags, [0, 1, 0, 0, 0, 0, 0, 0])
  lowered = []
  for run in runs:
    chunk, past = placed_chunk(run)
    lowered.append(run.chunk_fn.lower(run.state, past, jnp.ones(16, bool), run.data, chunk,
                                      steps.pad_lrs([0.05], 1)).as_text())
  assert lowered[0] == lowered[1]


@pytest.fixture(scope="module")
def domain_runs(tmp_path_factory):
  """Tiny Rotated MNIST5k (3 domains), SD: given boundaries, detected ones, and detectors firing never/always."""
  out = {}
  for name, over in [("given", {}), ("detected", {"boundaries": "detected"}),
                     ("never", {"boundaries": "detected", "detection.shift_threshold": 1e9}),
                     ("always", {"boundaries": "detected", "detection.shift_threshold": 1e-9})]:
    run = Run(tiny_config(**DOMAIN, **over), tmp_path_factory.mktemp(name))
    out[name] = run, run.run()
  return out


def test_detected_domain_boundaries_are_found_and_match_the_given_run(domain_runs):
  _, given = domain_runs["given"]
  run, got = domain_runs["detected"]
  bd = got["boundary_detection"]
  assert bd["detector"] == "shift" and bd["recall"] == 1.0 and bd["precision"] >= 0.8, bd
  assert bd["detected"] == bd["true"] and bd["mean_delay_steps"] == 0.0
  # Found where the tasks start, the learner does what given boundaries do: the same run.
  for k in SAME:
    assert got[k] == given[k], k
  assert run.rs.slots == [[0, 0], [1, 1], [2, 2]]
  assert "boundary_detection" not in given


def test_detectors_that_fire_never_or_always_fail_the_scores(domain_runs):
  never_run, never = domain_runs["never"]
  assert never["boundary_detection"]["recall"] == 0.0 and never["boundary_detection"]["detected"] == []
  # One segment: every domain's samples carry the learner's tag 0 (its only segment), not their domain.
  assert never_run.rs.slots == [[0, 0], [1, 0], [2, 0]]
  assert never["boundaries"] == []  # no memory update, no past model, no search
  _, always = domain_runs["always"]
  bd = always["boundary_detection"]
  # Every pass after the first opens a segment: 5 detections for 2 boundaries.
  assert len(bd["detected"]) == 5 and bd["recall"] == 1.0 and bd["precision"] == 0.4
  assert always["final"] != domain_runs["given"][1]["final"]


@pytest.mark.parametrize("scenario, fires_at", [("domain", []), ("class", [(1, 0), (2, 0)])])
def test_label_novelty_fires_where_new_labels_arrive(scenario, fires_at):
  """The novelty detector, not the stream's task starts: on a domain stream every task repeats the same digits,
  so it never fires; on a class stream it fires at the first pass of each new task, and at no later pass."""
  config = tiny_config(**{"data.scenario": scenario, "data.num_tasks": 3 if scenario == "domain" else 5,
                          "boundaries": "detected", "detection.detector": "novelty"})
  _, stream = streams.load(config_lib.resolved(config))
  detection, fired = run_state.Detection(), []
  for t in range(3):
    for e in range(2):
      if stream.new_segment(detection, t, e, step=10 * t + e, embed=None):
        fired.append((t, e))
  assert fired == fires_at and detection.detected == [10 * t + e for t, e in fires_at]
  assert [bool(o.get("novel")) for o in detection.observations[1:]] == [(t, e) in fires_at for t in range(3)
                                                                          for e in range(2)][1:]


def test_class_il_detected_by_label_novelty_equals_the_given_run(tmp_path):
  # two_tasks' epochs, 2 on task 0 (its second pass must not fire) then 1 a task: 6 passes fit the detected run's
  # slot table of 8, the given run's size (2 epochs a task: 10 passes, a table of 16 and two train programs more
  # to compile); both then run test_train.py's 5-task programs.
  over = {"data.num_tasks": 5, "eval.raw_pixels": False, "eval.every_task": False}
  given = Run(two_tasks(**over), tmp_path / "given").run()
  got = Run(two_tasks(**over, boundaries="detected"), tmp_path / "detected").run()
  bd = got["boundary_detection"]
  assert bd["detector"] == "novelty" and bd["precision"] == bd["recall"] == 1.0 and bd["detected"] == bd["true"]
  for k in SAME:
    assert got[k] == given[k], k


DETECTED = {**DOMAIN, "train.epochs": 2, "boundaries": "detected", "train.checkpoint_every_steps": 16}


def test_a_detected_boundary_run_interrupted_mid_task_and_at_a_boundary_resumes_exactly(tmp_path, monkeypatch, capfd):
  """Interrupted in task 1's second epoch (its boundary detected, a mid-epoch checkpoint saved), then at the
  detected boundary of task 2, then finished: equal to the uninterrupted run, detections included. In process,
  where a kill would land (checkpoint.fault_point raises); a SIGKILLed CLI run: tests/test_resume_cli.py."""
  want = Run(tiny_config(**DETECTED), tmp_path / "ref").run()
  monkeypatch.setenv("LASP_FAULT_MODE", "raise")
  for fault in ["step:1:1:16", "boundary:2"]:
    monkeypatch.setenv("LASP_FAULT", fault)
    with pytest.raises(checkpoint.FaultInjected):
      Run(tiny_config(**DETECTED), tmp_path / "resumed").run()
    assert not (tmp_path / "resumed" / "results.json").exists()
  monkeypatch.delenv("LASP_FAULT")
  capfd.readouterr()
  got = Run(tiny_config(**DETECTED), tmp_path / "resumed").run()
  assert "resuming" in capfd.readouterr().err
  assert want["boundary_detection"]["recall"] == 1.0
  assert strip_timing(got) == strip_timing(want)


@pytest.mark.parametrize("scenario", ["class", "domain"])
def test_a_checkpoint_from_before_segments_gets_the_segment_its_run_was_in(tmp_path, scenario):
  """Old checkpoints (no segments, slots or pass log) resume as the given-boundary run they were: the segment
  rebuilt from the progress equals the one the current code keeps, after task 0 and after task 1."""
  head = {"model.head_center": True} if scenario == "domain" else {}
  run = Run(two_tasks(**{"data.scenario": scenario, "eval.raw_pixels": False, **head}), tmp_path)
  run.start()
  for t in range(2):
    run.run_task(t)
    old = {k: v for k, v in run.rs.to_meta().items() if k not in ("segment", "slots", "steps_done", "pass_log")}
    rebuilt = run_state.RunState.from_meta(json.loads(json.dumps(old)), run.stream, run.task_epochs)
    assert rebuilt.segment == run.rs.segment and rebuilt.slots == run.rs.slots, (t, rebuilt.segment)
