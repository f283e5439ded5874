"""End-to-end runs on the tiny config: results, methods, no recompiles, invariants."""

import dataclasses
import json
import pathlib
import re
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import cifar10
from lasp_jax import config_lib, train
from lasp_jax.errors import ConfigError, TrainingError
from lasp_jax.eval import probe
from lasp_jax.loop import checkpoint, steps
from lasp_jax.loop.train_state import make_optimizer
from lasp_jax.method import contrastive, features, lookahead, mask_search, modulation, pools
from lasp_jax.platform import files
from lasp_jax.platform.optim import with_learning_rate
from tests.conftest import MLP, Run, mlp_two_tasks, placed_chunk, strip_timing, tiny_config, two_tasks

# One xdist worker for this module (`--dist loadgroup`): its module fixture, a training run, is then built once.
pytestmark = [pytest.mark.xdist_group("train"), pytest.mark.trajectory]

RESULT_KEYS = {"dataset", "method", "scenario", "seed", "num_tasks", "acc_matrix", "final", "forgetting", "bwt",
               "wall_time_s"}


def _global_cache_sizes():
  """Programs compiled so far by what the L-BFGS read-out runs (features of the train and test images, encoder
  and raw pixels; the accuracies) and by the mask search."""
  return features._features._cache_size(), probe._accuracies._cache_size(), mask_search.search_from._cache_size()


@pytest.fixture(scope="module")
def sd_run(tmp_path_factory):
  wd = tmp_path_factory.mktemp("sd")
  config = two_tasks(**{"train.epochs_first": 4, "data.num_tasks": 5})
  before = _global_cache_sizes()
  run = Run(config, wd)
  chunk_before = run.chunk_fn._cache_size()  # shared with this process's earlier runs of equal settings
  results = run.run()
  run.compiled = [a - b for a, b in zip(_global_cache_sizes(), before)]
  run.chunk_compiled = run.chunk_fn._cache_size() - chunk_before
  return run, results, wd


def test_results_file_and_shapes(sd_run):
  run, results, wd = sd_run
  on_disk = json.loads((wd / "results.json").read_text())
  assert RESULT_KEYS <= set(on_disk)
  assert on_disk["scenario"] == "class" and on_disk["num_tasks"] == 5
  for name in ("class_il", "task_il"):
    a = np.array(on_disk["acc_matrix"][name], dtype=float)
    assert a.shape == (5, 5)
    assert np.all(np.isfinite(np.diag(a))) and np.all(np.isnan(a[np.triu_indices(5, 1)]))
  assert all(np.isfinite([c["loss"] for c in on_disk["curves"]]))
  assert on_disk["acc_matrix"]["class_il"][0][0] > 80  # first task (2 digits) far above 50% chance
  assert len(on_disk["boundaries"]) == 4 and "selected_dims" in on_disk["boundaries"][0]
  assert (wd / "config.json").exists() and list((wd / "tensorboard").glob("events.*"))


def test_distillation_is_on_with_the_methods_weight(sd_run):
  """From task 1 on, SD's loss is SupCon + 5 x (selective) IRD with IRD > 0; task 0 has no IRD term."""
  _, results, _ = sd_run
  for c in results["curves"]:
    if c["task"] == 0:
      assert c["ird"] == 0.0 and c["loss"] == pytest.approx(c["supcon"], rel=1e-6)
    else:
      assert c["ird"] > 0.1 and c["loss"] == pytest.approx(c["supcon"] + 5.0 * c["ird"], rel=1e-5)


def test_the_tiny_sd_run_learns_what_pixels_cannot(sd_run):
  """Final Class-IL above a linear classifier on raw pixels and far above chance (10); every task's own
  Task-IL right after training it above 90 (2 digits: chance 50)."""
  _, results, _ = sd_run
  assert results["final"]["class_il"] > results["baselines"]["raw_pixels"]["class_il"]
  assert results["final"]["class_il"] > 40
  assert min(np.diag(np.array(results["acc_matrix"]["task_il"], float))) > 90


def test_no_recompilation_across_epochs_and_tasks(sd_run):
  run, _, _ = sd_run
  # Without and with a past model, each as a chunk of steps_per_call steps and of one step
  # (an epoch's remaining steps): nothing else, whatever the number of epochs and tasks.
  assert run.chunk_compiled <= 4
  # The read-out ran after 5 tasks and the search at 4 boundaries: features of 2 image sets x 2 kinds (encoder
  # after every task, raw pixels after the last), one accuracy program, one search program (fewer if an earlier
  # test of this process compiled the same shapes). A program per task would be >= 5.
  features, accuracies, search = run.compiled
  assert features <= 4 and accuracies <= 1 and search <= 1, run.compiled
  assert run.config.eval.probe == "lbfgs"  # the path counted above


def test_runs_of_equal_settings_share_one_compiled_chunk(tmp_path):
  """A method and its baselines in one process (command 1) trace and compile their chunk once, not per run."""
  a = Run(two_tasks(), tmp_path / "a")
  assert Run(two_tasks(), tmp_path / "b").chunk_fn is a.chunk_fn
  assert Run(two_tasks(method="finetune"), tmp_path / "c").chunk_fn is not a.chunk_fn  # no SD
  assert Run(two_tasks(**{"train.momentum": 0.5}), tmp_path / "d").chunk_fn is not a.chunk_fn


@pytest.mark.parametrize("method", ["co2l", "gm", "sd_gm"])
def test_every_method_runs(tmp_path, method):
  config = mlp_two_tasks(method=method)
  run = Run(config, tmp_path)
  results = run.run()
  assert results["method"] == method
  assert np.isfinite(results["final"]["class_il"])
  weight = 5.0 if method == "sd_gm" else 1.0  # the published lambda of each method
  for c in results["curves"][2:]:  # task 1 (task 0 has 2 epochs)
    assert c["ird"] > 0.1 and c["loss"] == pytest.approx(c["supcon"] + weight * c["ird"], rel=1e-5)
  gamma = modulation.get_salience(run.state.opt_state)
  if method in ("gm", "sd_gm"):
    # The salience the optimizer holds is the boundary's, and its reported frozen fraction is that of it.
    frac = results["boundaries"][0]["frac_weights_gamma_ge_1"]
    assert frac == pytest.approx(lookahead.weight_fraction_frozen(gamma))
    # Per layer: the frozen shares, weighted by each layer's size, add up to the whole fraction.
    layers = results["boundaries"][0]["gamma_by_layer"]
    assert len(layers) >= 3 and all(0 <= v["frozen"] <= 1 and v["max"] >= v["mean"] for v in layers.values())
    total = sum(v["size"] for v in layers.values())
    assert sum(v["frozen"] * v["size"] for v in layers.values()) / total == pytest.approx(frac, abs=1e-3)
    assert any(float(jnp.max(g)) > 0 for g in jax.tree.leaves(gamma)) and results["boundaries"][0]["eb_s"] is not None
  else:
    assert all(float(jnp.max(jnp.abs(g))) == 0 for g in jax.tree.leaves(gamma))  # no modulation without GM


def test_gm_in_the_optimizer_chain():
  """GM scales the raw gradient before weight decay and momentum: a weight with gamma >= 1 moves by
  weight decay (and momentum) only; gamma 0.5 halves the gradient's share."""
  tx = make_optimizer(momentum=0.9, weight_decay=0.1)
  params = {"w": {"kernel": jnp.array([1.0, 1.0, 1.0])}}
  state = with_learning_rate(tx.init(params), 0.5)
  state = modulation.set_salience(state, {"w": {"kernel": jnp.array([0.0, 0.5, 2.0])}})
  grads = {"w": {"kernel": jnp.array([2.0, 2.0, 2.0])}}
  upd, state = tx.update(grads, state, params)
  # step 1: -lr * (g * (1 - min(1, gamma)) + wd * p)
  np.testing.assert_allclose(upd["w"]["kernel"], [-0.5 * (2.0 + 0.1), -0.5 * (1.0 + 0.1), -0.5 * 0.1], rtol=1e-6)
  upd2, _ = tx.update(grads, state, params)
  # step 2: momentum buffer 0.9 * b1 + b1 (the same modulated gradient)
  np.testing.assert_allclose(upd2["w"]["kernel"], 1.9 * np.asarray(upd["w"]["kernel"]), rtol=1e-6)


def test_domain_incremental_run(tmp_path):
  # Unnormalized embeddings at R-MNIST's lr 0.01: at the tiny config's 0.05 the embedding norm of task 1 grew
  # without bound (0.7 -> 4e15 within an epoch, then a non-finite loss); SupCon's logits z.z'/tau
  # reward a larger scale, nothing bounds it.
  config = two_tasks(**{"data.scenario": "domain", "data.num_tasks": 2, "model.normalize_embedding": False,
                         "lasp.srs_data": "onlypast", "train.lr": 0.01, "eval.raw_pixels": False})
  results = Run(config, tmp_path).run()
  a = np.array(results["acc_matrix"]["domain_il"], dtype=float)
  assert a.shape == (2, 2) and np.isfinite(a[1]).all() and a[0, 0] > 80 and a[1, 1] > 80  # measured 96.9, 95.1
  z = [c["z_norm"] for c in results["curves"]]
  assert max(z) < 3 * z[0], z  # measured 0.6, 0.7, 0.69


def _step_setup(method, steps_per_call=1, **kw):
  """A 2-task run of ``method`` and its first chunk and a past model, placed as the run places them."""
  run = Run(mlp_two_tasks(method=method, **kw), tempfile.mkdtemp())
  return (run, *placed_chunk(run, steps_per_call))


def test_sd_with_every_dim_selected_equals_co2l():
  outs = []
  for method in ("co2l", "sd"):
    # IRD at Co2L's weight for both (SD's published default is 5); Co2L's step is the program its run compiled.
    run, chunk, past = _step_setup(method, **{"train.ird_weight": 1.0})
    d = run.config.model.embedding_dim
    state, m = run.chunk_fn(run.state, past, jnp.ones(d, bool), run.data, chunk, steps.pad_lrs([0.05], 1))
    outs.append((state.params, m))
  np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-5)
  # The subset's renormalization rounds differently from the full norm (~1e-7); a BatchNorm net's batch statistics
  # amplify that in the gradient. A real difference between the losses would move the weights by ~1e-2.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), outs[0][0], outs[1][0])


def test_a_two_dim_mask_changes_the_sd_step():
  run, chunk, past = _step_setup("sd", **{"train.ird_weight": 1.0})
  d = run.config.model.embedding_dim
  two = jnp.zeros(d, bool).at[:2].set(True)
  ms = [run.chunk_fn(jax.tree.map(jnp.copy, run.state), past, mask, run.data, chunk, steps.pad_lrs([0.05], 1))[1]
        for mask in (jnp.ones(d, bool), two)]
  ird = steps.metric_names(run.method).index("ird")
  assert abs(float(ms[0][0, ird]) - float(ms[1][0, ird])) > 1e-3 * float(ms[0][0, ird])


def test_gradient_modulation_transform_invariants():
  params = {"conv": {"kernel": jnp.ones((2, 3)), "bias": jnp.ones(3)}, "bn": {"scale": jnp.ones(3)}}
  gamma = {"conv": {"kernel": jnp.array([[0.0, 0.5, 2.0], [0.0, 1.0, 0.25]]), "bias": jnp.full(3, 5.0)},
           "bn": {"scale": jnp.zeros(3)}}
  tx = modulation.gradient_modulation()
  state = modulation.set_salience(tx.init(params), gamma)
  grads = jax.tree.map(lambda p: 2 * p, params)
  out, _ = tx.update(grads, state)
  np.testing.assert_allclose(out["conv"]["kernel"], [[2.0, 1.0, 0.0], [2.0, 0.0, 1.5]])
  np.testing.assert_allclose(out["conv"]["bias"], grads["conv"]["bias"])  # biases never modulated
  np.testing.assert_allclose(out["bn"]["scale"], grads["bn"]["scale"])    # zero salience: unchanged
  jax.tree.map(np.testing.assert_allclose, modulation.get_salience(state), gamma)


def test_nan_loss_stops_with_a_clear_message(tmp_path):
  config = two_tasks(**{"train.lr": 1e30})
  with pytest.raises(TrainingError, match=r"non-finite loss at task 0, epoch 1, step \d+"):
    Run(config, tmp_path).run()
  assert not (tmp_path / "results.json").exists()
  assert not list((tmp_path / "checkpoints").glob("*/"))  # nothing non-finite was saved


def test_nan_in_a_later_task_names_the_last_good_checkpoint(tmp_path):
  """Task 0 trains and is checkpointed; task 1 diverges: the error names that checkpoint, which restores."""
  config = mlp_two_tasks(method="co2l")
  run = Run(config, tmp_path)
  real = run.chunk_fn

  def diverging(state, past, *args):
    new, m = real(state, past, *args)
    return new, m * jnp.nan if past is not None else m  # only task 1 has a past model
  run.chunk_fn = diverging
  with pytest.raises(TrainingError, match=r"non-finite loss at task 1, epoch 1, step 1 of the epoch \(supcon nan, "
                                          r"ird nan, z_norm nan, z_var nan, grad_norm nan; the step before: none this "
                                          r"epoch\); last good checkpoint: \d+ in ") as caught:
    run.run()
  # The two parts as fields too (experiments/mechanisms.py records ``what`` as a diverged row's finding).
  assert str(caught.value) == f"{caught.value.what}; last good checkpoint: {caught.value.checkpoint}"
  assert caught.value.what.endswith("none this epoch)") and str(tmp_path) in str(caught.value.checkpoint)
  assert not (tmp_path / "results.json").exists()
  again = Run(config, tmp_path)
  assert again.maybe_restore() and again.rs.progress.task == 1
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(again.state.params))


@pytest.mark.parametrize("key,value,match", [
    ("dataset", "cifar100", "unknown dataset 'cifar100'"),
    ("method", "ewc", "unknown method 'ewc'"),
    ("lasp.srs_data", "future", "unknown lasp.srs_data 'future'"),
    ("model.embedding_dim", 1, "model.embedding_dim must be >= 2"),
    ("train.batch_size", 1, "train.batch_size must be >= 2"),
    ("train.epochs", 0, "train.epochs must be >= 1"),
    ("memory.size", -1, "memory.size must be >= 0"),
    ("memory.size", 3, "memory size 3 is impossible"),
    ("data.source", "idx", "data.source 'idx' does not apply to dataset 'mnist5k'"),
    ("data.train_per_class", -1, "data.train_per_class must be >= 0"),
    ("train.tail_multiple", 24, "train.tail_multiple must be 0 or divide train.batch_size 64, got 24"),
])
def test_bad_config_values(tmp_path, key, value, match):
  with pytest.raises(ConfigError, match=match):
    Run(tiny_config(**{key: value}), tmp_path)


def test_a_config_built_by_hand_names_what_it_lacks_and_an_older_one_reads_as_its_first_values():
  import ml_collections  # noqa: PLC0415
  with pytest.raises(ConfigError, match=r"^the config lacks lasp.srs_data, lasp.mask_objective, lasp.restart_selection "
                                        r"and \d+ more: build it on default_config.base_config\(\)$"):
    config_lib.validate(ml_collections.ConfigDict({"dataset": "mnist5k", "method": "sd"}))
  older = tiny_config().to_dict()
  del older["seeds_mode"], older["model"]["winograd"], older["lasp"]["eb_replicas"]  # keys added after runs were made
  del older["train"]["tail_multiple"], older["model"]["bn_groups"], older["method_args"]
  config_lib.validate(ml_collections.ConfigDict(older))


def test_every_checked_key_refuses_a_bad_value_and_names_itself():
  # The checks are tables of keys: a key spelled wrong there, or one that no longer checks, fails here.
  keys = [*config_lib._CHOICES, *config_lib._POSITIVE, *config_lib._AT_LEAST]
  good = tiny_config()
  config_lib.validate(good)
  for key in keys:
    typed = type(config_lib.flat(good)[key])  # a value of the key's own type, outside what it allows
    bad = ((typed("no-such-value") if typed is str else typed(-12345)) if key in config_lib._CHOICES else
           0 if key in config_lib._POSITIVE else config_lib._AT_LEAST[key] - 1)
    with pytest.raises(ConfigError, match=f"^(unknown )?{re.escape(key)} "):
      config_lib.validate(tiny_config(**{key: bad}))
  assert len(keys) == len(set(keys)) > 40


def test_unwritable_workdir(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  with pytest.raises(ConfigError, match="not writable"):
    Run(tiny_config(), blocker / "sub")


def test_workdir_probe_leaves_another_process_probe_alone(tmp_path):
  # Processes of one multi-host run prepare the same folder at once: a shared probe name let one process delete
  # the other's probe, whose own delete then failed ("not writable: No such file or directory").
  others = [tmp_path / ".write_test", tmp_path / ".write_test_other"]
  for f in others:
    f.write_text("another process")
  assert checkpoint.prepare_workdir(tmp_path) == tmp_path
  assert sorted(tmp_path.iterdir()) == sorted(others)  # both still there, and no probe of its own left behind


def test_atomic_write_leaves_another_writer_temporary_file_alone(tmp_path):
  other = tmp_path / "seeds.md.tmp"  # the name a shared temporary file had: another process's write in flight
  other.write_text("another process")
  checkpoint.write_text_atomic(tmp_path / "seeds.md", "| seed |")
  checkpoint.write_json_atomic(tmp_path / "r.json", {"a": [1.5]})
  assert other.read_text() == "another process"
  assert (tmp_path / "seeds.md").read_text() == "| seed |"
  assert json.loads((tmp_path / "r.json").read_text()) == {"a": [1.5]}
  assert sorted(f.name for f in tmp_path.iterdir()) == ["r.json", "seeds.md", "seeds.md.tmp"]


def test_atomic_write_that_fails_midway_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
  target = tmp_path / "cache.npz"
  target.write_bytes(b"old")
  seen = []

  def write(f):
    f.write(b"half of the new")
    raise OSError("disk full")

  with pytest.raises(OSError, match="disk full"):
    files.write_atomic(target, write, binary=True, before_replace=seen.append)
  assert target.read_bytes() == b"old" and seen == []  # no checksum written for a file that never appeared
  assert [f.name for f in tmp_path.iterdir()] == ["cache.npz"]
  # A hook that fails (e.g. the checksum's folder is gone) also leaves the old file and no temporary behind.
  with pytest.raises(FileNotFoundError):
    files.write_atomic(target, lambda f: f.write(b"new"), binary=True,
                       before_replace=lambda tmp: (tmp_path / "gone" / "sum").write_text("x"))
  assert target.read_bytes() == b"old" and [f.name for f in tmp_path.iterdir()] == ["cache.npz"]
  files.write_atomic(target, lambda f: f.write(b"new"), binary=True,
                     before_replace=lambda tmp: seen.append(pathlib.Path(tmp).read_bytes()))
  assert target.read_bytes() == b"new" and seen == [b"new"]  # the hook saw the finished file before the rename


def test_cifar10_config_input_path_on_tfds_mock_data(tmp_path):
  import tensorflow_datasets as tfds  # noqa: PLC0415  (optional dependency, only for data.source=tfds)
  c = cifar10.get_config()
  c.data.source = "tfds"
  c.data.num_tasks = 2  # the input path is the point; 2 tasks keep it short
  # Finetune: one train program for both tasks (no past model, no mask search). The MLP encoder (conftest.MLP):
  # ResNet-18's chunk is compiled by tests/helpers/multidevice_check.py, SD on CIFAR-shaped data by
  # test_experiments' tiny runs.
  c.method = "finetune"
  c.model.name, c.model.hidden, c.model.embedding_dim = MLP["model.name"], MLP["model.hidden"], 16
  c.train.batch_size, c.train.epochs_first, c.train.epochs, c.train.warmup_epochs = 16, 1, 1, 1
  c.memory.size, c.lasp.restarts, c.lasp.steps = 10, 4, 3
  c.eval.epochs, c.eval.augment, c.progress = 2, False, False
  with tfds.testing.mock_data(num_examples=40):
    results = Run(c, tmp_path).run()
  assert results["dataset"] == "cifar10" and np.array(results["acc_matrix"]["class_il"], float).shape == (2, 2)
  assert all(np.isfinite(c["loss"]) for c in results["curves"])


def test_checkpoint_points_with_unequal_chunks():
  lens = [np.zeros(n) for n in (4, 4, 1, 1)]
  assert [steps.checkpoint_due(lens, k, 4) for k in range(4)] == [True, True, False, False]
  assert [steps.checkpoint_due(lens, k, 5) for k in range(4)] == [False, True, False, True]


def test_an_epoch_is_whole_chunks_with_only_the_last_padded(tmp_path):
  """Chunks of steps_per_call steps, in the epoch's order; empty steps only at the last chunk's tail."""
  run = Run(two_tasks(**{"train.steps_per_call": 5}), tmp_path)
  plan = run.epoch_plan(0)
  chunks, lrs = run.epoch_chunks(plan)
  spe = plan.steps
  assert spe % 5 and [len(x) for x in lrs] == [5] * (spe // 5) + [spe % 5]
  assert all(ch.index.shape[0] == 5 for ch in chunks)
  has_data = np.concatenate([np.any(ch.valid, axis=-1) for ch in chunks])
  np.testing.assert_array_equal(has_data, np.arange(len(has_data)) < spe)
  flat = np.concatenate([ch.index[ch.valid] for ch in chunks])
  assert len(flat) == plan.per_epoch == len(set(flat.tolist()))
  np.testing.assert_array_equal(np.concatenate(lrs), plan.lrs[:spe])
  np.testing.assert_array_equal(steps.pad_lrs(lrs[-1], 5), np.r_[lrs[-1], np.zeros(5 - spe % 5)])


def test_a_chunks_padded_tail_steps_do_not_run():
  """Two real steps + two empty ones = the same two steps as two one-step chunks; the empty ones report zeros."""
  run, chunk, past = _step_setup("co2l", steps_per_call=4)
  d = run.config.model.embedding_dim
  two = steps.Batch(*[f[:2] for f in chunk])
  padded = two._replace(**{n: jnp.concatenate([f, jnp.zeros_like(f)]) for n, f in two._asdict().items()})
  s2 = jax.tree.map(jnp.copy, run.state)
  # The padded steps get a non-zero lr: they must not run whatever it is.
  s4, m4 = run.chunk_fn(run.state, past, jnp.ones(d, bool), run.data, padded, jnp.array([0.05, 0.04, 0.5, 0.5]))
  m2 = []
  for i, lr in enumerate([0.05, 0.04]):  # the one-step chunk test_every_method_runs[co2l] compiled
    one = jax.device_put(steps.Batch(*[f[i:i + 1] for f in two]), run.batch_sharding)
    s2, m = run.chunk_fn(s2, past, jnp.ones(d, bool), run.data, one, steps.pad_lrs([lr], 1))
    m2.append(m[0])
  assert int(s4.step) == int(s2.step) == 2
  np.testing.assert_array_equal(np.asarray(m4)[2:], 0.0)
  np.testing.assert_allclose(np.asarray(m4)[:2], m2, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), s4.params, s2.params)


def test_the_short_last_step_becomes_a_chunk_of_its_rows(tmp_path):
  """train.tail_multiple: the epoch's last step (750 digits in batches of 64: 46 rows) leaves its chunk for one
  of 48 rows; every other step, the samples and the lrs stay as they were."""
  run = Run(two_tasks(**{"train.steps_per_call": 5, "train.tail_multiple": 16}), tmp_path / "a")
  plan = run.epoch_plan(0)
  assert plan.per_epoch == 750 and plan.steps == 12
  for spc, lens in ((5, [5, 5, 1, 1]), (1, [1] * 12)):  # the tail shares its chunk / is alone in it
    r = Run(two_tasks(**{"train.steps_per_call": spc}), tmp_path / str(spc))
    full, full_lrs = r.epoch_chunks(plan)
    chunks, lrs = steps.split_tail(full, full_lrs, 16)
    assert chunks[-1].index.shape == (1, 48) and int(chunks[-1].valid.sum()) == 46
    assert [len(x) for x in lrs] == lens and [ch.valid.shape for ch in chunks[:-1]] == [(spc, 64)] * (len(lens) - 1)
    np.testing.assert_array_equal(np.concatenate(lrs), np.concatenate(full_lrs))
    rows = np.concatenate([ch.index[ch.valid] for ch in chunks])
    np.testing.assert_array_equal(rows, np.concatenate([ch.index[ch.valid] for ch in full]))
  assert steps.split_tail(full, full_lrs, 64) == (full, full_lrs)  # 46 rows round up to the batch: unchanged
  assert run.epoch_chunks(plan)[0][-1].index.shape == (1, 48)


def test_a_short_last_step_at_its_rows_equals_it_padded_to_the_batch():
  """The tail step (46 rows in 48) against the same step padded to 64: the same augmentation (drawn for 64
  rows), losses and update, up to float summation order. Drawing the tail's augmentation for its own 48 rows
  instead moves the loss by 2.5e-2; the tail and padded steps' metrics and updates differ by 7e-7 (MLP encoder;
  the tiny conv net's BatchNorm amplified that rounding to 4e-5)."""
  run, _, past = _step_setup("co2l")
  pool = pools.training_pool(run.stream, run.memory, 0)
  b = steps.epoch_batches(pool, 64, 1, np.random.default_rng(0))
  last = steps.Batch(*[np.asarray(f[-1]) for f in b])
  assert int(last.valid.sum()) == 46
  d, lr = run.config.model.embedding_dim, steps.pad_lrs([0.05], 1)
  start, outs = jax.tree.map(np.asarray, run.state.params), []
  for rows in (64, 48):
    chunk = jax.device_put(steps.Batch(*[f[:, :rows] for f in last]), run.batch_sharding)
    outs.append(run.chunk_fn(jax.tree.map(jnp.copy, run.state), past, jnp.ones(d, bool), run.data, chunk, lr))
  (s64, m64), (s48, m48) = outs
  np.testing.assert_allclose(m48, m64, rtol=1e-4)  # a BatchNorm net amplifies rounding in the gradient norm (2e-5)
  flat = lambda s: np.concatenate([np.ravel(a - b) for a, b in zip(jax.tree.leaves(s.params), jax.tree.leaves(start))])
  u48, u64 = flat(s48), flat(s64)  # the updates
  assert np.linalg.norm(u48 - u64) < 1e-3 * np.linalg.norm(u64)
  cfg = dataclasses.replace(run.loss_cfg, batch_size=0)  # the tail's own 48 rows of uniforms
  own = steps.make_chunk_fn(run.model, run.tx, run.aug_cfg, cfg, compiler_options=run.compiler_options)
  chunk = jax.device_put(steps.Batch(*[f[:, :48] for f in last]), run.batch_sharding)
  _, m_own = own(jax.tree.map(jnp.copy, run.state), past, jnp.ones(d, bool), run.data, chunk, lr)
  assert abs(float(m_own[0, 0]) - float(m64[0, 0])) > 1e-2


def test_a_run_with_tail_steps_interrupted_mid_epoch_resumes_exactly(tmp_path, monkeypatch):
  """Tail steps (task 0: 46 rows in 48; task 1 with its memory: 22 in 32) in a run killed after step 10 of
  task 0's first epoch: resumed from that mid-epoch checkpoint, it equals the uninterrupted run."""
  config = mlp_two_tasks(**{"train.tail_multiple": 16, "train.checkpoint_every_steps": 5, "eval.raw_pixels": False})
  want = Run(config, tmp_path / "ref").run()
  monkeypatch.setenv("LASP_FAULT_MODE", "raise")
  monkeypatch.setenv("LASP_FAULT", "step:0:0:10")
  with pytest.raises(checkpoint.FaultInjected):
    Run(config, tmp_path / "resumed").run()
  monkeypatch.delenv("LASP_FAULT")
  got = Run(config, tmp_path / "resumed").run()
  assert strip_timing(got) == strip_timing(want)
  assert [c["task"] for c in want["curves"]] == [0, 0, 1] and all(np.isfinite(c["loss"]) for c in want["curves"])


CO2L_METRICS = steps.metric_names(contrastive.Co2L())  # the contrastive family's step columns

def test_step_metrics_reads_a_partial_epoch_saved_before_the_norms():
  """A mid-epoch checkpoint of older code holds (loss, supcon, ird, num_valid) rows, or those with z_norm and
  grad_norm: the columns it lacks are NaN, the others keep their names."""
  old = steps.step_metrics([[1.0, 2.0, 3.0, 64.0]], CO2L_METRICS)
  np.testing.assert_array_equal(old, [[1.0, 2.0, 3.0, np.nan, np.nan, np.nan, 64.0]])
  six = steps.step_metrics([[1.0, 2.0, 3.0, 0.75, 0.5, 64.0]], CO2L_METRICS)
  np.testing.assert_array_equal(six, [[1.0, 2.0, 3.0, 0.75, np.nan, 0.5, 64.0]])
  assert steps.step_metrics([], CO2L_METRICS).shape == (0, len(CO2L_METRICS))
  np.testing.assert_array_equal(steps.step_metrics(np.arange(14.0).reshape(2, 7), CO2L_METRICS),
                                np.arange(14.0).reshape(2, 7))


def _corrupt(step_dir):
  for f in step_dir.rglob("*"):
    if f.is_file():
      f.write_bytes(b"\x00garbage")


def test_a_corrupted_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys):
  config = two_tasks(**{"eval.every_task": False, "eval.raw_pixels": False})
  Run(config, tmp_path).run()
  ckpts = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
  assert len(ckpts) == 2  # after task 0 and after task 1 (max_to_keep 2)
  _corrupt(tmp_path / "checkpoints" / str(ckpts[-1]))
  run = Run(config, tmp_path)
  assert run.maybe_restore()
  assert run.rs.progress.task == 1  # the checkpoint after task 0
  assert f"unreadable checkpoint(s) {ckpts[-1]}" in capsys.readouterr().err
  _corrupt(tmp_path / "checkpoints" / str(ckpts[0]))
  with pytest.raises(TrainingError, match="no readable checkpoint"):
    Run(config, tmp_path).maybe_restore()


def _mixed_tree():
  return {"state": {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.int32(7),
                    "key": np.uint32([3, 4])}, "past": {"b": np.float32([0.5, -1.5]), "n": np.int32([[1, 2]])}}


def test_a_checkpoint_packs_its_leaves_one_array_per_dtype_and_restores_them_bit_for_bit(tmp_path):
  tree = _mixed_tree()
  packed = checkpoint.pack(tree)
  assert {k: v.tolist() for k, v in packed.items()} == {
      "int32": [1, 2, 7], "float32": [0.5, -1.5, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "uint32": [3, 4]}  # tree order
  ckpt = checkpoint.Checkpointer(tmp_path)
  ckpt.save(tree, {"task": 3})
  assert sorted(p.name for p in (tmp_path / "checkpoints" / "1").iterdir() if p.is_dir()) == ["meta", "packed"]
  got, meta = ckpt.restore(jax.tree.map(np.zeros_like, tree))
  assert meta == {"task": 3}
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b, strict=True), got, tree)


def test_a_packed_checkpoint_is_refused_by_a_tree_of_another_layout_and_an_older_one_per_leaf_still_restores(
    tmp_path):
  """Sizes per dtype that add up are not enough: another tree (two leaves' shapes swapped, a leaf renamed) is refused as
  unreadable; a checkpoint of one array per leaf (older code) restores as it did."""
  tree = _mixed_tree()
  ckpt = checkpoint.Checkpointer(tmp_path / "packed")
  ckpt.save(tree, {"task": 0})
  other = {**tree, "past": {"b": np.float32([[0.5], [-1.5]]), "n": np.int32([1, 2])}}
  renamed = {**tree, "past": {"c": tree["past"]["b"], "n": tree["past"]["n"]}}  # same dtypes, shapes and order
  for like in (other, renamed):
    with pytest.raises(TrainingError, match=r"no readable checkpoint .* \(tried 1 \(holds another tree of arrays "
                                            r"than this run's\)\)"):
      ckpt.restore(like)
  old = checkpoint.Checkpointer(tmp_path / "old")
  old.manager.save(1, args=checkpoint.ocp.args.Composite(trees=checkpoint.ocp.args.StandardSave(tree),
                                                         meta=checkpoint.ocp.args.JsonSave({"task": 2})))
  old.manager.wait_until_finished()
  got, meta = old.restore(jax.tree.map(np.zeros_like, tree))
  assert meta == {"task": 2}
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b, strict=True), got, tree)


def test_inconsistent_settings_are_refused_before_training(tmp_path):
  with pytest.raises(ConfigError, match="lasp.srs_data='onlypast' searches the replay memory, but memory.size is 0"):
    Run(tiny_config(**{"memory.size": 0, "lasp.srs_data": "onlypast"}), tmp_path)
  with pytest.raises(ConfigError, match="train.batch_size 2048 is larger than the smallest task's 750 "):
    Run(tiny_config(**{"data.num_tasks": 2, "train.batch_size": 2048}), tmp_path)


def test_a_domain_memory_larger_than_a_domain_is_refused_before_training(tmp_path):
  config = tiny_config(**{"data.scenario": "domain", "data.num_tasks": 3, "data.train_per_class": 10,
                          "memory.size": 150, "model.normalize_embedding": False})
  with pytest.raises(ConfigError, match="memory.size 150 is larger than a domain's 100 training images"):
    Run(config, tmp_path)
  assert not list(tmp_path.iterdir())  # nothing written


def test_resume_never_sets_the_old_checkpoints_aside_and_unchecked_ones_are_refused(tmp_path, capsys):
  config = two_tasks(**{"eval.every_task": False, "eval.raw_pixels": False})
  Run(config, tmp_path).run()
  (tmp_path / "config.json").write_text('{"seed": 0, "train": {')  # cut short
  with pytest.raises(ConfigError, match="its config.json is unreadable"):
    Run(config, tmp_path).maybe_restore()
  (tmp_path / "config.json").unlink()
  with pytest.raises(ConfigError, match="has checkpoints but no config.json"):
    Run(config, tmp_path).maybe_restore()
  never = Run(train.config_lib.override(two_tasks(**{"eval.every_task": False,
                                                                    "eval.raw_pixels": False}), resume="never"),
                             tmp_path)
  assert not never.maybe_restore()
  assert never.ckpt.latest() is None and (tmp_path / "checkpoints_replaced").is_dir()
  assert "moved to" in capsys.readouterr().err


def test_a_checkpoint_that_cannot_be_written_is_one_error_and_leaves_the_last_good_one(tmp_path, monkeypatch):
  ckpt = checkpoint.Checkpointer(tmp_path)
  trees = {"w": np.ones(3, np.float32)}
  assert ckpt.save(trees, {"task": 0}) == 1

  def full(*_, **__):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(ckpt.manager, "save", full)
  with pytest.raises(TrainingError, match="cannot write checkpoint 2 in .*: No space left on device; the last good "
                                          "one is 1"):
    ckpt.save(trees, {"task": 1})
  assert ckpt.latest() == 1
