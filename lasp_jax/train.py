"""``train_and_evaluate``: a whole continual-learning run, resumable at any step.

Per task t: (t >= 1) rebuild the replay memory, snapshot the past model, run the
LASP boundary work (mask search, EB salience); train the epochs in compiled
chunks of steps; probe; checkpoint. All randomness derives from (seed, task,
epoch, step), so a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import tqdm

from lasp_jax import (checkpoint, config_lib, cpu_kernels, evaluate, health, lookahead, loop, memory as memory_lib,
                      modulation, pools, probe, progress, provenance, report, steps)
from lasp_jax.data import streams
from lasp_jax.errors import ConfigError, TrainingError
from lasp_jax.models import build_model
from lasp_jax.steps import (Batch, DeviceData, PastModel, epoch_batches, make_chunk_fn, num_steps,
                            past_model)
from lasp_jax.train_state import TrainState, create_train_state, make_optimizer, task_lrs
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def data_mesh(devices=None) -> Mesh:
  """A 1-D ("data",) mesh over ``devices`` (default: all; one device is a mesh of one)."""
  return Mesh(np.asarray(jax.devices() if devices is None else devices), ("data",))


# ------------------------------------------------------------------------------ the run

class ContinualRun:
  """Host-side driver of one run; all device state lives in ``self.state``/``self.past``."""

  def __init__(self, config: ml_collections.ConfigDict, workdir, devices=None, on_task_end=None):
    """``on_task_end(run, t)`` may return a JSON-able dict stored under results['extra']."""
    config = config_lib.resolved(config)
    config_lib.validate(config)
    self.on_task_end = on_task_end
    self.config = config
    progress.enable(config.progress)
    self.workdir = checkpoint.prepare_workdir(workdir)
    self.dataset, self.stream = streams.load(config)
    self.model = build_model(config)
    self.tx = make_optimizer(momentum=config.train.momentum, weight_decay=config.train.weight_decay)
    self.aug_cfg = config_lib.augment_config(config, rotate=self.stream.rotates)
    self.loss_cfg = steps.loss_config(config, self.stream)
    self.compiler_options = cpu_kernels.compiler_options(cpu_kernels.of_model(config.model))
    self.chunk_fn = make_chunk_fn(self.model, self.tx, self.aug_cfg, self.loss_cfg,
                                  compiler_options=self.compiler_options)
    s = self.stream
    self.mesh = data_mesh(devices)
    if config.train.batch_size % self.mesh.size:
      raise ConfigError(f"train.batch_size {config.train.batch_size} is not divisible by the "
                        f"{self.mesh.size} devices of the data mesh")
    self.replicated = NamedSharding(self.mesh, P())
    self.batch_sharding = NamedSharding(self.mesh, P(None, "data"))
    put = lambda x, dtype=None: jax.device_put(np.asarray(x, dtype), self.replicated)
    self.host = self._fresh_host_state()
    self.data = DeviceData(put(self.dataset.train_images), put(s.train_labels), None, None)
    self._put_slots()  # the training images' angles and tags are per slot; the test copies' per task
    self.test_data = DeviceData(put(self.dataset.test_images), put(s.test_labels), put(s.test_angles, np.float32),
                                put(np.arange(s.num_tasks), np.int32))
    # Built on the default device, then replicated: one init program whatever the mesh.
    sample_shape = (2,) + tuple(self.dataset.train_images.shape[1:])
    self.state: TrainState = jax.device_put(create_train_state(self.model, self.tx, sample_shape, config.seed),
                                            self.replicated)
    self.past: Optional[PastModel] = None
    self.ckpt = checkpoint.Checkpointer(self.workdir)
    self.writer = None

  def _fresh_host_state(self) -> dict:
    t, d = self.stream.num_tasks, self.config.model.embedding_dim
    names = list(self.stream.metrics)
    return {"progress": {"task": 0, "epoch": 0, "call": 0, "boundary_done": False, "partial": []},
            "memory": {"indices": [], "tasks": []}, "mask": [True] * d,
            "acc": {n: [[None] * t for _ in range(t)] for n in names}, "overall": {n: [None] * t for n in names},
            "probe_epoch": [None] * t, "boundaries": [], "curves": [], "wall_time_s": 0.0,
            # The learner's segments (tasks as it knows them: the stream's tasks unless it detects them), its
            # slots (domain, contrastive tag) and the passes it trained.
            "segment": {"index": 0, "epoch": 0, "passes": [], "seen": 0}, "slots": self.stream.initial_slots(),
            "steps_done": 0, "pass_log": []}

  # ---------------------------------------------------------------- checkpoint
  def _trees(self):
    past = self.past or PastModel(self.state.params, self.state.batch_stats)
    return {"state": self.state, "past": past}

  def save(self) -> None:
    meta = dict(self.host, has_past=self.past is not None)
    meta["wall_time_s"] = self.host["wall_time_s"] + (time.perf_counter() - self._t_start)
    self.ckpt.save(self._trees(), meta)

  def maybe_restore(self) -> bool:
    """Restores the workdir's newest readable checkpoint if ``config.resume`` allows (checkpoint.may_resume)."""
    if not checkpoint.may_resume(self.ckpt, self.workdir, self.config):
      return False
    trees, meta = self.ckpt.restore(jax.tree.map(np.asarray, self._trees()))
    put = lambda tree: jax.device_put(tree, self.replicated)
    self.state = put(trees["state"])
    self.past = PastModel(*put(tuple(trees["past"]))) if meta.pop("has_past") else None
    self.host = meta if "segment" in meta else self._with_segments(meta)
    self._put_slots()
    return True

  def _with_segments(self, meta: dict) -> dict:
    """A checkpoint written before the learner had segments (its boundaries were the tasks'), given them."""
    p, s = meta["progress"], self.stream
    t = p["task"] if p["epoch"] or p["boundary_done"] else max(p["task"] - 1, 0)  # the task now in training
    return {**meta, "segment": {"index": t, "epoch": p["epoch"] if t == p["task"] else self.task_epochs(t),
                                "passes": [[t, s.task_domain(t)]], "seen": t * len(s.train_indices(0))},
            "slots": s.initial_slots(), "steps_done": 0, "pass_log": []}

  # ---------------------------------------------------------------- task pieces
  @property
  def memory(self) -> memory_lib.Memory:
    m = self.host["memory"]
    return memory_lib.Memory(np.asarray(m["indices"], np.int64), np.asarray(m["tasks"], np.int64))

  def _set_memory(self, mem: memory_lib.Memory):
    self.host["memory"] = {"indices": mem.indices.tolist(), "tasks": mem.tasks.tolist()}

  # ---------------------------------------------------------------- segments and slots
  def _put_slots(self) -> None:
    """The device's slot tables (rotation angle and contrastive tag of every slot) from the host's slot list."""
    n, slots = self.stream.slot_capacity, self.host["slots"]
    angles, tags = np.zeros(n, np.float32), np.zeros(n, np.int32)
    for i, (domain, tag) in enumerate(slots):
      angles[i], tags[i] = self.stream.angles[domain], tag
    put = lambda x: jax.device_put(x, self.replicated)
    self.data = self.data._replace(angles=put(angles), tags=put(tags))

  def slot(self, t: int) -> int:
    """The slot of task t's samples in the current segment (a new slot when the pair is new)."""
    key, slots = list(self.stream.slot_key(t, self.host["segment"]["index"])), self.host["slots"]
    if key not in slots:
      slots.append(key)
      self._put_slots()
    return slots.index(key)

  def segment_samples(self) -> Batch:
    """The stream samples the current segment trained on (every task and slot of its passes)."""
    parts = [pools.task_pool(self.stream, t, slot) for t, slot in self.host["segment"]["passes"]]
    return pools.concat_pools(*parts) if parts else pools.empty_pool()

  def incoming(self, t: int, e: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``detection.window`` samples epoch e of task t serves (training-set indices, their domains):
    what a detector sees."""
    idx = np.random.default_rng([self.config.seed, t, e, 0x6E6577]).permutation(self.stream.train_indices(t))
    idx = idx[:self.config.detection.window]
    return idx, np.full(len(idx), self.stream.task_domain(t))

  def embed(self, index, domain) -> np.ndarray:
    """Eval-mode embeddings of training images at their domains' rotations (a detector's view of a batch)."""
    view = self.data._replace(angles=jax.device_put(np.asarray(self.stream.angles, np.float32), self.replicated))
    return np.asarray(probe.extract_features(self.model, self.state.variables(), view, np.asarray(index),
                                             np.asarray(domain), self.aug_cfg, batch_size=len(index),
                                             kind="embedding"))

  def boundary(self, t: int) -> None:
    """A new segment before epoch ``progress.epoch`` of task t: memory update from the segment that ends,
    past-model snapshot and LASP work on the data it starts with."""
    checkpoint.fault_point(f"boundary:{t}")
    c, s, seg = self.config, self.stream, self.host["segment"]
    previous, seen = self.segment_samples(), seg["seen"]
    k = seg["index"] + 1
    self.host["segment"] = {"index": k, "epoch": 0, "passes": [], "seen": seen + len(previous.index)}
    mem = s.update_memory(self.memory, task=k, capacity=c.memory.size, seed=c.seed, previous=previous, seen=seen)
    self._set_memory(mem)
    if not config_lib.method(c).distill:
      return
    self.past = past_model(self.state)
    if not (config_lib.uses_sd(c) or config_lib.uses_gm(c)):
      return
    res = lookahead.at_boundary(self, k, mem, pools.training_pool(s, mem, t, self.slot(t)))
    if config_lib.uses_sd(c):
      self.host["mask"] = res.mask.tolist()
    if res.gamma is not None:
      self.state = self.state.replace(opt_state=modulation.set_salience(self.state.opt_state, res.gamma))
    info = dict(task=t, **res.info)
    if not s.given_boundaries:
      info.update(segment=k, step=self.host["steps_done"])
    self.host["boundaries"].append(info)
    if res.info["sd_fallback_to_full_ird"] and config_lib.uses_sd(c):
      tqdm.tqdm.write(f"task {t}: salient subset has {res.info['selected_dims']} dim(s); SD falls back to full IRD",
                      file=sys.stderr)

  def train_pool(self, t: int) -> tuple[Batch, int]:
    """Task t's training pool as the method defines it, and the samples of one epoch (pools.method_pool)."""
    return pools.method_pool(config_lib.method(self.config), self.stream, self.memory, t, self.slot(t))

  def task_epochs(self, t: int) -> int:
    """The passes the stream makes over task t's data."""
    return self.config.train.epochs_first if t == 0 else self.config.train.epochs

  def epoch_plan(self, t: int) -> dict:
    """What the next epoch of task t needs: pool, epoch size, the lr of each of its steps, mask, shuffle seed.

    The schedule and the shuffle follow the learner's segment: its first ``train.epochs_first`` (segment 0)
    or ``train.epochs`` epochs anneal as a task's would, later ones stay at the schedule's last value.
    """
    c, seg = self.config, self.host["segment"]
    pool, per_epoch = self.train_pool(t)
    spe = num_steps(per_epoch, c.train.batch_size)
    lrs = task_lrs(c.train, epochs=self.task_epochs(0) if seg["index"] == 0 else c.train.epochs,
                   steps_per_epoch=spe)
    start = seg["epoch"] * spe
    lrs = lrs[start:start + spe] if start < len(lrs) else np.full(spe, lrs[-1])
    return dict(pool=pool, per_epoch=per_epoch, spe=spe, lrs=lrs, mask=jnp.asarray(self.host["mask"], bool),
                shuffle=[c.seed, seg["index"], seg["epoch"]])

  def epoch_chunks(self, plan: dict) -> tuple[list, list]:
    """The epoch's chunks of batches ((steps_per_call, B) per field) and the lr of each real step.

    The last chunk's tail is padded with empty steps, which the compiled loop skips
    (steps.chunk_body): one program for every chunk, and no padded step costs time.
    The lrs stay the real steps' only (checkpoint_due counts them); pad_lrs makes
    them the chunk's length.
    """
    c, spe, spc = self.config, plan["spe"], self.config.train.steps_per_call
    batches = epoch_batches(plan["pool"], c.train.batch_size, spc, np.random.default_rng(plan["shuffle"]),
                            take=plan["per_epoch"])
    lrs = plan["lrs"].astype(np.float32)
    return ([Batch(*[f[k] for f in batches]) for k in range(len(batches.index))],
            [lrs[a:a + spc] for a in range(0, spe, spc)])

  def progress_bar(self, t: int, epochs: int):
    return tqdm.tqdm(total=epochs, initial=self.host["progress"]["epoch"], desc=f"task {t}",
                     disable=not self.config.progress, leave=True)

  def epoch_start(self) -> tuple[float, list]:
    """Clock and metric list of an epoch; the metrics of chunks run before an interruption come from the checkpoint."""
    return time.perf_counter(), [steps.step_metrics(self.host["progress"].get("partial", []))]

  def end_epoch(self, t: int, e: int, plan: dict, chunks, outs, t0: float, bar) -> None:
    """The epoch's step metrics (checked finite; waits for the device, so the rate is real) averaged into one
    curve row with the degenerate reference values of its batches ``chunks``; progress, bar and TensorBoard."""
    m = self._check_finite(outs, t, e, 0)
    n = m[:, steps.COLUMN["num_valid"]]
    rate = n[len(outs[0]):].sum() / max(time.perf_counter() - t0, 1e-9)
    m, n = m[n > 0], n[n > 0]
    means = {k: float((n / max(n.sum(), 1)) @ m[:, i]) for k, i in steps.COLUMN.items() if k != "num_valid"}
    lr = float(plan["lrs"][-1])
    tc = self.config.train
    refs = health.reference_values(chunks, temperature=tc.temperature, base_temperature=tc.base_temperature)
    self.host["curves"].append({"task": t, "epoch": e + 1, **means, "lr": lr, **refs})
    self._log_pass(t, e, plan)
    self.host["progress"].update(epoch=e + 1, call=0, partial=[], boundary_done=False,
                                 lr_max=max(self.host["progress"].get("lr_max", 0.0), float(np.max(plan["lrs"]))))
    bar.update(1)
    bar.set_postfix(loss=f"{means['loss']:.3f}", ird=f"{means['ird']:.3f}", lr=f"{lr:.4f}", img_s=f"{rate:.0f}")
    if self.writer:
      for k, v in {**means, "lr": lr}.items():
        self.writer.add_scalar(f"{k}_{t}", v, int(self.state.step))

  def _log_pass(self, t: int, e: int, plan: dict) -> None:
    """The pass just trained, in the log (task, epoch, first step, steps) and in the learner's segment."""
    self.host["pass_log"].append({"task": t, "epoch": e, "step": self.host["steps_done"], "steps": plan["spe"]})
    self.host["steps_done"] += plan["spe"]
    self.host["segment"]["epoch"] += 1

  def note_pass(self, t: int) -> None:
    """Task t's data joins the current segment's (what its boundary's memory update draws from)."""
    seg, key = self.host["segment"], [t, self.slot(t)]
    if key not in seg["passes"]:
      seg["passes"].append(key)

  def end_task(self, t: int, bar) -> None:
    """Closes the task's progress bar and runs the health checks on it (one line per flag, kept for results)."""
    bar.close()
    c = self.config
    flags = health.task_flags(t, self.host["curves"], lrs=[self.host["progress"].get("lr_max", c.train.lr)],
                              floor=c.train.lr * c.train.lr_min_ratio,
                              boundaries=[b for b in self.host["boundaries"] if b["task"] == t],
                              selective=config_lib.uses_sd(c))
    for f in flags:
      tqdm.tqdm.write(f.line(), file=sys.stderr)
    self.host.setdefault("health", []).extend(dataclasses.asdict(f) for f in flags)

  def train_task(self, t: int) -> None:
    loop.train_in_lockstep([self], t, self)

  # The chunk executor of one run (train_in_lockstep): the run's own state, its chunk program.
  def begin_epoch(self, plans) -> None:
    self._mask = plans[0]["mask"]

  def execute(self, chunks, lrs) -> list:
    chunk = jax.device_put(chunks[0], self.batch_sharding)
    self.state, m = self.chunk_fn(self.state, self.past, self._mask, self.data, chunk, lrs)
    return [m]

  def sync(self) -> None:
    """Nothing to do: the state is the run's own."""

  def save_mid_epoch(self, t: int, e: int, k: int, outs) -> None:
    """A checkpoint after chunk k of epoch e, with the epoch's metrics so far."""
    prog = self.host["progress"]
    prog["partial"] = self._check_finite(outs, t, e, 0).tolist()
    prog["call"] = k + 1
    self.save()

  def _check_finite(self, outs, t, e, first_step):
    """All step metrics of the epoch so far; raises at the first non-finite loss."""
    m = np.concatenate([steps.step_metrics(o) for o in outs])
    bad = np.flatnonzero(~np.isfinite(m[:, steps.COLUMN["loss"]]))
    if bad.size:
      i = int(bad[0])
      before = steps.describe_step(m, i - 1) if i else "none this epoch"
      raise TrainingError(f"non-finite loss at task {t}, epoch {e + 1}, step {first_step + i + 1} of the epoch "
                          f"({steps.describe_step(m, i)}; the step before: {before}); "
                          f"last good checkpoint: {self.ckpt.latest()} in {self.ckpt.path}")
    return m

  # ---------------------------------------------------------------- evaluation
  def evaluate(self, t: int) -> probe.ProbeData:
    """The read-out ``eval.probe`` names, after task t; returns its data for the raw-pixel baseline."""
    pd = evaluate.probe_data(self, t)
    res = evaluate.EVALUATORS[self.config.eval.probe](self, t, pd)
    for name, row in res.per_task.items():
      self.host["acc"][name][t] = [None if not np.isfinite(v) else float(v) for v in row]
      self.host["overall"][name][t] = res.overall[name]
      if self.writer:
        self.writer.add_scalar(f"probe/{name}", res.overall[name], t)
    self.host["probe_epoch"][t] = res.epoch
    return pd

  def raw_pixel_baseline(self, t: int, pd: probe.ProbeData) -> None:
    self.host["baselines"] = {"raw_pixels": evaluate.raw_pixels(self, t, pd)}

  # ---------------------------------------------------------------- driver
  def _timed(self, phase: str, fn, t: int):
    """Runs fn(t), adding its wall seconds (device work finished) to the phase's total; returns fn's result."""
    t0 = time.perf_counter()
    out = fn(t)
    jax.block_until_ready(self.state.params)
    timing = self.host.setdefault("timing", {})
    timing[phase] = round(timing.get(phase, 0.0) + time.perf_counter() - t0, 3)
    return out

  def start(self) -> None:
    """Restores a checkpoint if there is one, writes config.json, opens the TensorBoard writer."""
    self._t_start = time.perf_counter()
    resumed = self.maybe_restore()
    checkpoint.write_json_atomic(self.workdir / "config.json",
                                 {**config_lib.flat(self.config), "provenance": provenance.provenance()})
    if resumed:
      p = self.host["progress"]
      tqdm.tqdm.write(f"resuming {self.workdir}: task {p['task']}, epoch {p['epoch']}, chunk {p['call']}",
                      file=sys.stderr)
    self.writer = report.tensorboard_writer(self.workdir)

  def before_epoch(self, t: int) -> None:
    """A boundary before the next epoch of task t if the stream says (or its detector finds) one is due."""
    prog = self.host["progress"]
    if not prog["boundary_done"]:
      if self.stream.new_segment(self, t, prog["epoch"]):
        self._timed("boundary_s", self.boundary, t)
      self.note_pass(t)
      prog["boundary_done"] = True

  def after_task(self, t: int) -> None:
    """The probe (after every task, or the last), the raw-pixel baseline, the task-end hook and checkpoint.

    The baseline has its own timing phase (``baselines_s``): ``probe_s`` is the work the
    published code also does, which the reference comparison sets side by side.
    """
    last = t == self.stream.num_tasks - 1
    if self.config.eval.every_task or last:
      checkpoint.fault_point(f"probe:{t}")
      pd = self._timed("probe_s", self.evaluate, t)
      if last and self.config.eval.raw_pixels:
        self._timed("baselines_s", functools.partial(self.raw_pixel_baseline, pd=pd), t)
    if self.on_task_end is not None:
      self.host.setdefault("extra", []).append({"task": t, **(self.on_task_end(self, t) or {})})
    self.host["progress"].update(task=t + 1, epoch=0, call=0, boundary_done=False, partial=[], lr_max=0.0)
    self.save()

  def finish(self) -> dict:
    results = self.results()
    checkpoint.write_json_atomic(self.workdir / "results.json", results)
    if self.config.pictures:
      from lasp_jax import report  # pylint: disable=g-import-not-at-top  (matplotlib only when drawing)
      report.run_pictures(results, self.workdir)
    if self.writer:
      self.writer.close()
    self.ckpt.close()
    return results

  def run_task(self, t: int) -> None:
    charge_training([self], self.train_task, t)
    self.after_task(t)

  def run(self) -> dict:
    self.start()
    for t in range(self.host["progress"]["task"], self.stream.num_tasks):
      self.run_task(t)
    return self.finish()

  def results(self) -> dict:
    wall = self.host["wall_time_s"] + time.perf_counter() - self._t_start
    return report.results(self.config, self.stream, self.host, wall_time_s=wall)


def charge_training(runs, train, t: int) -> None:
  """Runs ``train(t)`` (task t's epochs of ``runs``) and adds its wall seconds, less the boundaries it ran
  (their own phase, ``boundary_s``), to every run's ``train_s``: a shared program's time is every seed's."""
  before = [r.host.setdefault("timing", {}).get("boundary_s", 0.0) for r in runs]
  t0 = time.perf_counter()
  train(t)
  jax.block_until_ready([r.state.params for r in runs])
  spent = sum(r.host["timing"].get("boundary_s", 0.0) - b for r, b in zip(runs, before))
  elapsed = time.perf_counter() - t0 - spent
  for r in runs:
    r.host["timing"]["train_s"] = round(r.host["timing"].get("train_s", 0.0) + elapsed, 3)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir) -> dict:
  """Runs (or resumes) the continual run described by ``config`` in ``workdir``.

  Returns:
    The dictionary also written to ``workdir/results.json``.
  """
  return ContinualRun(config, workdir).run()

