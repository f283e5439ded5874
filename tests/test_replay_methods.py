"""The cross-entropy family: the device reservoir, the replay methods' defining rules on hand cases, and runs that
train, resume and vmap like the contrastive family's."""

import math
import os
from types import SimpleNamespace as NS

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from lasp_jax import config_lib, train
from lasp_jax.loop import checkpoint
from lasp_jax.method import buffer, registry
from lasp_jax.method.base import StepInputs
from lasp_jax.method.classifier import Replay
from lasp_jax.method.der import logit_mse
from lasp_jax.method.icarl import ICaRL
from tests.conftest import Run, tiny_config


def _offer_one_by_one(seen: int, r: np.ndarray, valid: np.ndarray, capacity: int, slots: list) -> list:
  """The reservoir as mammoth writes it, sample by sample, with the draws r the batch made."""
  out = list(slots)
  for i in np.flatnonzero(valid):
    if seen < capacity:
      out[seen] = i
    elif r[i] < capacity:
      out[r[i]] = i
    seen += 1
  return out


@pytest.mark.parametrize("seen", [0, 3, 7, 40])
def test_a_batch_offered_at_once_fills_the_slots_it_would_fill_one_by_one(seen):
  key, capacity = jax.random.PRNGKey(seen), 8
  valid = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1], bool)  # padding rows are never offered
  slot = np.asarray(buffer.reservoir_slots(key, seen, jnp.asarray(valid), capacity))
  n = seen + np.cumsum(valid) - valid
  r = np.asarray(jax.random.randint(key, valid.shape, 0, jnp.asarray(n) + 1))  # the draws the function made
  expect = _offer_one_by_one(seen, r, valid, capacity, [None] * capacity)
  got = [None] * capacity
  for i, s in enumerate(slot):
    if s < capacity:
      assert got[s] is None, "two rows of one batch written to one slot"
      got[s] = i
  assert got == expect  # None: a slot the batch left as it was
  assert all(s == capacity for s, v in zip(slot, valid) if not v)


def test_the_reservoir_keeps_each_of_n_samples_with_probability_size_over_n():
  capacity, n, batch, trials = 10, 40, 8, 4000

  def kept(key):
    buf = buffer.empty(capacity)
    for j, k in enumerate(jax.random.split(key, n // batch)):
      rows = jnp.arange(j * batch, (j + 1) * batch)
      buf = buffer.insert(buf, k, index=rows, domain=rows, label=rows, task=rows, logits=None,
                          valid=jnp.ones(batch, bool))
    return jnp.zeros(n).at[buf.index].set(1.0)

  freq = np.asarray(jax.jit(jax.vmap(kept))(jax.random.split(jax.random.PRNGKey(0), trials))).mean(0)
  # each sample: 10/40 = 0.25; 4,000 trials give a standard error of 0.0068
  assert np.max(np.abs(freq - capacity / n)) < 0.035, freq
  assert np.asarray(kept(jax.random.PRNGKey(1))).sum() == capacity


def test_a_draw_takes_distinct_filled_rows_and_marks_the_rest_while_the_memory_fills():
  buf = buffer.empty(6)._replace(seen=jnp.int32(3))
  slots, valid = buffer.draw(buf, jax.random.PRNGKey(0), 5)
  assert np.asarray(valid).tolist() == [True, True, True, False, False]
  assert sorted(np.asarray(slots)[:3].tolist()) == [0, 1, 2]
  full = buffer.empty(6)._replace(seen=jnp.int32(50))
  slots, valid = buffer.draw(full, jax.random.PRNGKey(1), 4)
  assert np.asarray(valid).all() and len(set(np.asarray(slots).tolist())) == 4


def _step_inputs(capacity=20, seen=100):
  data = type("Data", (), {})()
  data.images = jnp.zeros((capacity, 4, 4, 1), jnp.uint8)
  data.angles = jnp.zeros(1)
  rows = jnp.arange(capacity, dtype=jnp.int32)
  mem = buffer.empty(capacity, 3)._replace(seen=jnp.int32(seen), index=rows, label=rows)  # a row: its label
  state = type("State", (), {"memory": mem})()
  return StepInputs(state, None, None, data, None, None)


def test_der_plus_plus_takes_two_independent_draws():
  from lasp_jax.data.augment import AugmentConfig  # noqa: PLC0415
  from lasp_jax.method.classifier import Settings  # noqa: PLC0415
  method = registry.get("derpp")
  cfg = Settings(method, 3, 1, True, minibatch=5, alpha=1.0, beta=1.0, augment=False)
  s, aug = _step_inputs(), AugmentConfig(size=4, rotate=False)

  # the two draws' labels (a row's label is its slot) for 600 keys, in one program
  draws = jax.jit(jax.vmap(lambda k: jnp.stack([r.labels for r in method.memory_draws(s, k, aug, cfg)])))
  hits = np.mean([bool(set(a) & set(b)) for a, b in np.asarray(draws(jax.random.split(jax.random.PRNGKey(0), 600)))])
  # Two independent draws of 5 of 20 share a row with probability 1 - C(15,5)/C(20,5) = 0.806; the same draw
  # twice, 1; disjoint draws, 0.
  assert abs(hits - (1 - math.comb(15, 5) / math.comb(20, 5))) < 0.06, hits


def test_er_is_one_cross_entropy_over_the_stream_and_the_draw_together():
  method = registry.get("er")
  logits = jnp.array([[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
  labels, valid = jnp.array([0, 1, 0]), jnp.array([True, True, False])  # the third row: padding
  r_logits = jnp.array([[1.0, 3.0], [0.0, 0.0]])
  replay = Replay(None, jnp.array([0, 1]), None, jnp.array([True, False]))  # one remembered sample so far
  loss, terms = method.loss(logits, labels, valid, [replay], [r_logits], None)
  ce = lambda z, y: float(jax.nn.logsumexp(z) - z[y])
  hand = (ce(logits[0], 0) + ce(logits[1], 1) + ce(r_logits[0], 0)) / 3
  assert float(loss) == pytest.approx(hand, rel=1e-6) and float(terms["ce"]) == pytest.approx(hand, rel=1e-6)


def test_der_matches_the_logits_stored_at_insertion_by_their_mean_squared_error():
  current, stored = jnp.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), jnp.array([[1.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
  # the valid row only: ((0)^2 + 2^2 + 3^2) / 3
  assert float(logit_mse(current, stored, jnp.array([True, False]))) == pytest.approx(13 / 3)
  method = registry.get("der")
  cfg = type("Cfg", (), {"alpha": 0.5})()
  logits, labels, valid = jnp.array([[0.0, 0.0, 0.0]]), jnp.array([1]), jnp.array([True])
  loss, terms = method.loss(logits, labels, valid, [Replay(None, None, stored, jnp.array([True, False]))],
                            [current], cfg)
  assert float(terms["ce"]) == pytest.approx(math.log(3)) and float(loss) == pytest.approx(math.log(3) + 13 / 6)


def der_protocol(**overrides):
  """A tiny run of the DER paper's MNIST protocol: the MLP, one epoch per task, constant SGD, no augmentation."""
  return tiny_config(**{"model.name": "mlp", "model.hidden": (32, 32), "augment.train": False,
                        "train.epochs_first": 1, "train.epochs": 1, "train.schedule": "constant",
                        "train.momentum": 0.0, "train.weight_decay": 0.0, "train.batch_size": 10, "train.lr": 0.05,
                        "train.steps_per_call": 8, "method_args.minibatch_size": 10,
                        "eval.raw_pixels": False, **overrides})


def test_a_cross_entropy_methods_epoch_is_its_tasks_own_samples_its_memory_only_through_its_draws(tmp_path):
  """The host memory (data/memory.py, written at boundaries for the contrastive family's pool) never joins a
  cross-entropy method's pool: A-GEM with it scored 81 % Class-IL on Split-MNIST where the DER paper has 46 %."""
  run = Run(der_protocol(method="er", **{"memory.size": 20}), tmp_path / "er")
  run.start()
  run.run_task(0)
  run.run_task(1)  # its boundary wrote 20 samples of task 0 into the host memory
  assert len(run.memory) == 20
  own = len(run.stream.train_indices(1))
  for name in registry.FAMILIES["cross-entropy"]:
    pool, per_epoch = registry.get(name).pool(run.stream, run.memory, 1, state=run.state)
    if name == "ce_joint":
      assert per_epoch == own + len(run.stream.train_indices(0)), name  # every task so far: the bound
    elif name != "icarl":  # its exemplars join its pool by design (its own test)
      assert per_epoch == own and pool.is_current.all(), name


def test_a_methods_traits_are_values_not_functions():
  """A method of a subclass named like a trait (the draw function once named as the pool trait) makes the trait
  truthy everywhere it is read."""
  from lasp_jax.method import base  # noqa: PLC0415
  traits = [k for k, v in base.Method.__annotations__.items() if "ClassVar" in str(v)]
  for name in registry.METHODS:
    method = registry.get(name)
    assert not [k for k in traits if callable(getattr(method, k))], name


@pytest.mark.trajectory
def test_replay_remembers_what_finetuning_forgets(tmp_path):
  runs = {m: train.train_and_evaluate(der_protocol(method=m), tmp_path / m) for m in ("ce_finetune", "er", "derpp")}
  first_task = {m: r["acc_matrix"]["class_il"][-1][0] for m, r in runs.items()}
  # After four more tasks, finetuning has forgotten much of the first task's digits (65 % here); a memory of 40
  # samples keeps them (84.5 and 88 %).
  assert min(first_task["er"], first_task["derpp"]) > first_task["ce_finetune"] + 10, first_task
  assert all(not r["health"]["checks"] for r in runs.values())
  assert [c["lr"] for c in runs["er"]["curves"]] == pytest.approx([0.05] * 5)  # the constant schedule


@pytest.mark.parametrize("method", ["er", "derpp"])
def test_a_replay_run_stopped_mid_task_resumes_to_the_same_results(tmp_path, method):
  config = der_protocol(method=method, **{"train.checkpoint_every_steps": 8, "data.num_tasks": 2})
  whole = train.train_and_evaluate(config, tmp_path / "whole")
  os.environ.update(LASP_FAULT="step:1:0:2", LASP_FAULT_MODE="raise")
  try:
    with pytest.raises(checkpoint.FaultInjected):
      train.train_and_evaluate(config, tmp_path / "stopped")
  finally:
    os.environ.pop("LASP_FAULT"), os.environ.pop("LASP_FAULT_MODE")
  resumed = train.train_and_evaluate(config, tmp_path / "stopped")
  assert resumed["acc_matrix"] == whole["acc_matrix"] and resumed["curves"] == whole["curves"]


def test_vmapped_seeds_of_a_replay_method_equal_the_seeds_run_one_by_one(tmp_path):
  from lasp_jax import seeds  # noqa: PLC0415
  base = der_protocol(method="der", num_seeds=2, **{"data.num_tasks": 2})
  one_by_one = seeds.SeedGroup(base, tmp_path / "seq").run()
  vmapped = seeds.SeedGroup(config_lib.override(base, seeds_mode="vmap"), tmp_path / "vmap").run()
  for a, b in zip(one_by_one, vmapped):
    np.testing.assert_allclose(a["acc_matrix"]["class_il"][-1], b["acc_matrix"]["class_il"][-1], atol=0.2)
    np.testing.assert_allclose([c["loss"] for c in a["curves"]], [c["loss"] for c in b["curves"]], rtol=1e-4)


def test_agem_projects_only_when_the_gradients_disagree_and_then_onto_the_orthogonal_plane():
  from lasp_jax.method.agem import agem_project, tree_vdot  # noqa: PLC0415
  g_ref = {"w": jnp.array([1.0, 0.0]), "b": jnp.array([1.0])}
  agree = {"w": jnp.array([2.0, 3.0]), "b": jnp.array([-1.0])}  # g . g_ref = 1 >= 0: unchanged
  assert jax.tree.map(lambda a, b: bool(jnp.all(a == b)), agem_project(agree, g_ref), agree) == {"w": True, "b": True}
  disagree = {"w": jnp.array([-3.0, 2.0]), "b": jnp.array([1.0])}  # g . g_ref = -2: minus (-2 / 2) g_ref
  out = agem_project(disagree, g_ref)
  np.testing.assert_allclose(out["w"], [-2.0, 2.0])
  np.testing.assert_allclose(out["b"], [2.0])
  assert abs(float(tree_vdot(out, g_ref))) < 1e-6


def test_gem_keeps_an_agreeing_gradient_and_projects_a_disagreeing_one_into_agreement():
  from lasp_jax.method.gem import gem_dual, gem_project  # noqa: PLC0415
  G = jnp.array([[0.0, 1.0], [1.0, 1.0], [5.0, 5.0]])
  active = jnp.array([True, True, False])  # the third task has no remembered samples yet
  agree = jnp.array([1.0, 2.0])
  np.testing.assert_array_equal(gem_project(agree, G, active, 0.0), agree)
  g = jnp.array([1.0, -2.0])  # disagrees with task 0 (-2) and task 1 (-1)
  out = gem_project(g, G, active, 0.0)
  # The closest gradient agreeing with both is (1, 0): the dual's v = (2, 0) (only task 0's constraint binds),
  # g + 2 (0, 1), up to the dual's 1e-3 ridge.
  np.testing.assert_allclose(out, [1.0, 0.0], atol=5e-3)
  assert np.all(np.asarray(G[:2] @ out) >= -5e-3)
  # The dual's coordinate descent against the box-constrained minimum by hand: P = [[2, 1], [1, 1]], b = (-1, -1)
  # -> v = (0, 1); with a margin of 0.5 on both: v = (0.5, 0.5).
  P, b = jnp.array([[2.0, 1.0], [1.0, 1.0]]), jnp.array([-1.0, -1.0])
  np.testing.assert_allclose(gem_dual(P, b, jnp.array([True, True]), 0.0), [0.0, 1.0], atol=1e-4)
  np.testing.assert_allclose(gem_dual(P, b, jnp.array([True, True]), 0.5), [0.5, 0.5], atol=1e-4)


def test_agem_and_gem_write_their_memory_as_each_task_ends_a_quota_each(tmp_path):
  for method in ("agem", "gem"):
    ctx, carry = train.start(der_protocol(method=method, **{"data.num_tasks": 5}), tmp_path / method)
    train.run_task(ctx, carry, 0)
    mem = carry.state.memory
    assert int(mem.seen) == 40 // 5 and set(np.asarray(mem.task)[:8].tolist()) == {0}  # capacity 40, 5 tasks
    assert set(np.asarray(mem.label)[:8].tolist()) <= {0, 1}
    train.run_task(ctx, carry, 1)
    assert int(carry.state.memory.seen) == 16 and set(np.asarray(carry.state.memory.task)[8:16].tolist()) == {1}
  # offered 30 of each (mammoth today: one batch a task): the reservoir fills the last 10 slots with the second
  # task's first offered, then keeps a uniform share: every slot holds one of the two tasks' samples
  ctx, carry = train.start(der_protocol(method="agem", **{"data.num_tasks": 5, "method_args.task_samples": 30}),
                           tmp_path / "agem30")
  for t in range(2):
    train.run_task(ctx, carry, t)
  mem = jax.tree.map(np.asarray, carry.state.memory)
  assert int(mem.seen) == 60 and set(mem.task[30:].tolist()) == {1} and set(mem.task[:30].tolist()) <= {0, 1}
  assert 10 <= int(np.sum(mem.task == 1)) < 40 and set(mem.label[mem.task == 1].tolist()) <= {2, 3}


def test_herding_picks_the_sample_that_brings_the_exemplar_mean_closest_to_the_class_mean():
  from lasp_jax.method.icarl import herding  # noqa: PLC0415
  # Class mean (0.5, 0.5): the first pick is the row nearest it, (0.6, 0.4); the second the row that brings the
  # mean of two closest: (0.4, 0.6) (mean (0.5, 0.5)), not (1, 0) or (0, 1).
  feats = np.array([[1.0, 0.0], [0.6, 0.4], [0.0, 1.0], [0.4, 0.6]])
  assert herding(feats, 2).tolist() == [1, 3]
  assert sorted(herding(feats, 9).tolist()) == [0, 1, 2, 3]  # never more than the class has, each once


def test_icarl_is_refused_on_a_domain_stream_in_one_line(tmp_path):
  from lasp_jax.errors import ConfigError  # noqa: PLC0415
  with pytest.raises(ConfigError, match="method 'icarl' is defined for data.scenario class, not 'domain'"):
    config_lib.validate(config_lib.resolved(der_protocol(method="icarl", **{"data.scenario": "domain"})))
  refusal = "method_args.exemplars='published_raw' applies to method 'icarl' only, not 'er'"
  with pytest.raises(ConfigError, match=refusal):
    config_lib.validate(config_lib.resolved(der_protocol(method="er", **{"method_args.exemplars": "published_raw"})))


def test_icarl_keeps_herded_exemplars_per_class_and_reads_out_by_their_nearest_mean(tmp_path):
  ctx, carry = train.start(der_protocol(method="icarl", **{"eval.every_task": True}), tmp_path / "icarl")
  train.run_task(ctx, carry, 0)
  mem = jax.tree.map(np.asarray, carry.state.memory)  # host copies: the next step donates the state's buffers
  assert int(mem.seen) == 40 and np.bincount(mem.label).tolist() == [20, 20]  # 40 // 2 classes
  train.run_task(ctx, carry, 1)  # 4 classes: 10 each, classes 0 and 1 cut to their first (herding's) 10
  labels = np.asarray(carry.state.memory.label)
  assert np.bincount(labels, minlength=4).tolist() == [10, 10, 10, 10]
  np.testing.assert_array_equal(np.asarray(carry.state.memory.index)[labels == 0], mem.index[mem.label == 0][:10])


def test_icarl_replays_the_published_uint8_cast_of_its_exemplars_only_when_asked():
  images = np.array([[0, 128, 255, 254], [255, 7, 0, 255], [3, 255, 1, 2]], np.uint8)
  batch = NS(index=jnp.array([2, 0, 1]), is_current=jnp.array([1, 0, 0], bool))
  s = NS(data=NS(images=jnp.asarray(images)), batch=batch)
  got = np.asarray(ICaRL().step_images(s, NS(exemplars="published_uint8")))
  # the current row as it is; an exemplar's pixel 1 (of 255) where it was white, else 0: the [0, 1] float cast to uint8
  np.testing.assert_array_equal(got, [[3, 255, 1, 2], [0, 0, 1, 0], [1, 0, 0, 1]])
  np.testing.assert_array_equal(np.asarray(ICaRL().step_images(s, NS(exemplars="images"))), images[[2, 0, 1]])
  np.testing.assert_array_equal(np.asarray(ICaRL().step_images(s, NS(exemplars="published_raw"))), got)


def test_nearest_mean_of_exemplars_on_normalized_and_on_raw_features():
  from lasp_jax.eval import evaluators  # noqa: PLC0415
  feats, labels = jnp.array([[1.0, 0.0], [3.0, 0.0], [0.0, 1.0]]), jnp.array([0, 0, 1])
  test = jnp.array([[0.9, 0.5]])
  # raw: means (2, 0) and (0, 1), distances sqrt(1.46) and sqrt(1.06): class 1; class 2 has no exemplar
  raw = np.asarray(evaluators.nme_logits(feats, labels, test, 3, normalize=False))[0]
  np.testing.assert_allclose(raw[:2], [-math.sqrt(1.46), -math.sqrt(1.06)], rtol=1e-6)
  assert raw[2] == -np.inf and raw.argmax() == 1
  # normalized: means (1, 0) and (0, 1), the test row (0.874, 0.486): class 0
  u = np.array([0.9, 0.5]) / math.hypot(0.9, 0.5)
  normed = np.asarray(evaluators.nme_logits(feats, labels, test, 3))[0]
  np.testing.assert_allclose(normed[:2], [-math.hypot(u[0] - 1, u[1]), -math.hypot(u[0], u[1] - 1)], rtol=1e-6)
  assert normed.argmax() == 0
  assert evaluators.EVALUATORS["nme_raw"].keywords == {"normalize": False}
  assert ICaRL().readout(NS(method_args={"exemplars": "published_raw"})) == "nme_raw"
  assert ICaRL().readout(NS(method_args={"exemplars": "published_uint8"})) == "nme"
  assert ICaRL().readout(NS(method_args=ml_collections.ConfigDict())) == "nme"  # a config from before the key


def test_fdr_distance_and_its_memory_of_every_task_so_far(tmp_path):
  from lasp_jax.method.fdr import softmax_distance  # noqa: PLC0415
  logits, stored = jnp.array([[0.0, 0.0], [5.0, 5.0]]), jnp.array([[math.log(3.0), 0.0], [0.0, 0.0]])
  # softmax (0.5, 0.5) against (0.75, 0.25): distance 0.25 * sqrt(2); the second row is invalid
  assert float(softmax_distance(logits, stored, jnp.array([True, False]))) == pytest.approx(0.25 * math.sqrt(2))
  ctx, carry = train.start(der_protocol(method="fdr", **{"data.num_tasks": 5}), tmp_path / "fdr")
  for t in range(2):
    train.run_task(ctx, carry, t)
  mem = jax.tree.map(np.asarray, carry.state.memory)
  # capacity 40 after two tasks: 20 of each, the first task's cut to its first 20
  assert int(mem.seen) == 40 and np.bincount(mem.task).tolist() == [20, 20]
  assert np.abs(mem.logits).sum(1).min() > 0  # every row keeps the logits of the model it entered under


def test_gss_scores_by_the_largest_cosine_and_keeps_a_sample_that_points_elsewhere():
  from lasp_jax.method.gss import max_cosine, offer  # noqa: PLC0415
  G, g, valid3 = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]), jnp.array([2.0, 0.0]), jnp.array([True] * 3)
  cosine = lambda valid: float(max_cosine(G @ g, jnp.linalg.norm(G, axis=1), jnp.linalg.norm(g), valid))
  assert cosine(valid3) == pytest.approx(2.0) and cosine(jnp.array([False, True, True])) == pytest.approx(1.0)
  rows = {k: jnp.arange(4, dtype=jnp.int32) for k in ("index", "domain", "label", "task")}
  valid = jnp.ones(4, bool)

  def run(batch_c, last_c):
    buf, scores = offer(buffer.empty(3), jnp.zeros(3), jax.random.PRNGKey(0), rows, valid, batch_c,
                        jnp.array([0.0, 0.0, 0.0, last_c]))
    return np.asarray(buf.index).tolist(), np.asarray(scores).tolist(), int(buf.seen)

  # While there is room every sample takes the next slot with the batch's score; then the fourth, its gradient
  # against the memory's nearly opposite (score ~0), replaces a slot (probability s / (s + c) ~ 1) ...
  idx, sc, seen = run(0.5, 1e-9)
  assert seen == 4 and sorted(idx) != [0, 1, 2] and 3 in idx and sc[idx.index(3)] == pytest.approx(1e-9)
  # ... one that points along it (score ~2, here 1e9) never does, nor any sample of a batch scored >= 1
  assert run(0.5, 1e9)[:2] == ([0, 1, 2], [0.5, 0.5, 0.5])
  assert run(1.5, 1e-9)[0] == [0, 1, 2]


def test_the_gradient_gram_of_a_dense_network_equals_the_one_of_its_per_sample_gradients():
  import optax  # noqa: PLC0415
  from jax.flatten_util import ravel_pytree  # noqa: PLC0415

  from lasp_jax.method import sample_grads  # noqa: PLC0415
  from lasp_jax.model import models  # noqa: PLC0415
  loss = optax.softmax_cross_entropy_with_integer_labels
  x, y = jax.random.normal(jax.random.PRNGKey(1), (6, 28, 28, 1)), jnp.array([0, 1, 2, 0, 1, 2])

  model_of = lambda name, **keys: models.build_model(
      config_lib.override(tiny_config(), **{"model.name": name, **keys}), "classifier", 3)
  model = model_of("mlp", **{"model.hidden": (5, 4)})
  v = model.init(jax.random.PRNGKey(0), x, train=False)

  w = jnp.array([1.0, 0.0, 1.0, 1.0])  # the stream rows' weights (one padded): n = 4 stream rows, m = 2 drawn

  @jax.jit
  def both(v):
    def row(image, label):
      f = lambda p: loss(model.apply({**v, "params": p}, image[None], train=False)[1], label[None])[0]
      return ravel_pytree(jax.grad(f)(v["params"]))[0]

    g = jax.vmap(row)(x, y)
    blocks = sample_grads.gram_blocks(model, v, x, y, loss, n=4, weights=w)
    rows = sample_grads.blocks_of_rows(sample_grads.row_gradients(model, v, x, y, loss), n=4, weights=w)
    return sample_grads.dense_gram(model, v, x, y, loss), g @ g.T, blocks, rows

  # the MLP (dense layers only): one backward pass gives every pair's inner product
  k, expect, blocks, rows = both(v)
  tol = dict(rtol=1e-4, atol=1e-6 * float(jnp.max(expect)))
  np.testing.assert_allclose(k, expect, **tol)
  assert float(jnp.max(jnp.abs(expect - jnp.diag(jnp.diag(expect))))) > 0.01 * float(jnp.max(expect))
  # GSS's blocks of it, from the Gram and from the rows' gradients (the fallback), are those of the whole K
  for got in (blocks, rows):
    np.testing.assert_allclose(got.cross, expect[:4, 4:], **tol)
    np.testing.assert_allclose(got.diag, np.diag(expect), **tol)
    np.testing.assert_allclose(got.weighted, w @ expect[:4, :4] @ w, rtol=1e-4)
  # a convolution's weights are not a dense layer's: no Gram (decided while tracing), the caller forms the gradients
  conv = model_of("mnistnet")
  shapes = jax.eval_shape(lambda: conv.init(jax.random.PRNGKey(0), x, train=False))
  assert jax.eval_shape(lambda v: sample_grads.dense_gram(conv, v, x, y, loss), shapes) is None
  got = jax.eval_shape(lambda v: sample_grads.gram_blocks(conv, v, x, y, loss, n=4, weights=w), shapes)
  assert (got.cross.shape, got.diag.shape, got.weighted.shape) == ((4, 2), (6,), ())


def test_hal_rings_each_tasks_portion_first_in_first_out_and_keeps_an_anchor_per_class(tmp_path):
  from lasp_jax.method.hal import ring_slots  # noqa: PLC0415
  # portion 3 of task 1 (slots 3-5), 2 seen: rows go to 5, 3, 4, 5 -> the first 5 is written over (a sentinel)
  slot = np.asarray(ring_slots(jnp.int32(2), jnp.array([True, True, False, True, True]), 3, jnp.int32(1)))
  assert slot[1:].tolist()[:1] == [3] and slot[3] == 4 and slot[4] == 5 and slot[0] > 5 and slot[2] > 5  # 2: padding
  ctx, carry = train.start(der_protocol(method="hal", **{"data.num_tasks": 5}), tmp_path / "hal")
  train.run_task(ctx, carry, 0)
  mem = jax.tree.map(np.asarray, carry.state.memory)
  # an anchor per class of task 0, a full portion (40 // 5) of task 0's digits, phi restarted, task 1 next
  assert int(mem["num_anchors"]) == 2 and mem["anchors"][2:].sum() == 0
  assert int(mem["buffer"].seen) == 8 and set(mem["buffer"].label[:8].tolist()) <= {0, 1}
  assert int(mem["task"]) == 1 and not mem["phi"].any() and np.isfinite(mem["anchors"][:2]).all()
