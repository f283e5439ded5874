"""Orbax checkpoints of the whole run, and atomic JSON files.

A checkpoint holds the device pytrees (train state with optimizer, momentum and
GM salience; the frozen past model) through ``StandardSave`` and the host-side
progress (task, epoch, position in the epoch, memory, mask, accuracy rows,
boundary records) through ``JsonSave``. Orbax writes into a temporary folder
and renames it, so a checkpoint is complete or absent. Non-finite values are
refused before anything is written.

The pytrees are saved packed: one flat array per dtype, their leaves in tree
order (:func:`pack`), unpacked against the restoring run's own trees. Orbax
costs about 2 ms per array besides its fixed ~60 ms: a conv net's 80 leaves
took ~230 ms a save, packed ~65 (BENCHMARKS.md). Checkpoints of one array per
leaf, as older code wrote them, still restore.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile

import jax
import numpy as np
import orbax.checkpoint as ocp

from lasp_jax import config_lib
from lasp_jax.errors import ConfigError, TrainingError, one_line
from lasp_jax.platform import files


def write_json_atomic(path, obj) -> None:
  """Writes JSON to a temporary file in the same folder, then renames it."""
  write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=False))


def write_text_atomic(path, text: str) -> None:
  """Writes ``text`` so that readers see the old file or the new one, never part of one."""
  files.write_atomic(path, lambda f: f.write(text))


def all_finite(tree) -> bool:
  return all(bool(np.all(np.isfinite(np.asarray(l)))) for l in jax.tree.leaves(tree)
             if np.issubdtype(np.asarray(l).dtype, np.floating))


def pack(tree) -> dict:
  """``tree``'s leaves on the host as one flat array per dtype (named by it), leaves in tree order."""
  groups = {}
  for leaf in jax.tree.leaves(tree):
    leaf = np.asarray(leaf)
    groups.setdefault(leaf.dtype.name, []).append(leaf.ravel())
  return {name: np.concatenate(parts) for name, parts in groups.items()}


def unpack(packed: dict, like):
  """The inverse of :func:`pack`: ``like``'s tree with its leaves' shapes, read from ``packed`` in order."""
  leaves, treedef = jax.tree.flatten(like)
  offsets, out = dict.fromkeys(packed, 0), []
  for leaf in leaves:
    name, size = np.dtype(leaf.dtype).name, int(np.prod(np.shape(leaf)))
    out.append(packed[name][offsets[name]:offsets[name] + size].reshape(np.shape(leaf)))
    offsets[name] += size
  if any(offsets[name] != packed[name].size for name in packed):
    raise ValueError("the packed arrays do not hold the tree's leaves")
  return jax.tree.unflatten(treedef, out)


class LayoutMismatch(ValueError):
  """A packed checkpoint holds another tree than the restoring run's (e.g. another model under resume=force)."""


def layout(tree) -> list:
  """Each leaf's path, dtype and shape, in tree order: what a packed checkpoint must be restored into."""
  return [[jax.tree_util.keystr(path), np.dtype(leaf.dtype).name, list(np.shape(leaf))]
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


class Checkpointer:
  """Saves and restores run checkpoints under ``workdir/checkpoints``."""

  def __init__(self, workdir, max_to_keep: int = 2):
    self.path = pathlib.Path(workdir).absolute() / "checkpoints"
    self.max_to_keep = max_to_keep
    self.reopen()

  def reopen(self) -> None:
    """A manager on ``self.path`` as it is now (after its folder was moved away: an empty one)."""
    self.manager = ocp.CheckpointManager(
        self.path, options=ocp.CheckpointManagerOptions(max_to_keep=self.max_to_keep, create=True))

  def latest(self):
    return self.manager.latest_step()

  def save(self, trees, meta: dict) -> int:
    packed = pack(trees)
    if not all_finite(packed):
      raise TrainingError("refusing to write a checkpoint with non-finite values")
    step = (self.latest() or 0) + 1
    try:
      self.manager.save(step, args=ocp.args.Composite(packed=ocp.args.StandardSave(packed),
                                                     meta=ocp.args.JsonSave(dict(meta, tree_layout=layout(trees)))))
      self.manager.wait_until_finished()
    except OSError as e:  # disk full, folder gone or read-only: Orbax renames only a complete checkpoint
      raise TrainingError(f"cannot write checkpoint {step} in {self.path}: {e.strerror or e}; the last good one is "
                          f"{self.latest()}") from None
    return step

  def restore(self, abstract_trees):
    """The newest readable checkpoint; an unreadable newer one is reported in one line and skipped."""
    bad = []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        trees, meta = self._restore(step, abstract_trees)
      except LayoutMismatch as e:
        bad.append(f"{step} ({e})")
        continue
      except Exception as e:  # pylint: disable=broad-except  (any damage: missing files, bad JSON, bad arrays)
        bad.append(f"{step} ({type(e).__name__})")
        continue
      if bad:
        print(f"warning: unreadable checkpoint(s) {', '.join(bad)} in {self.path}; resuming from checkpoint {step}",
              file=sys.stderr)
      return trees, meta
    raise TrainingError(f"no readable checkpoint in {self.path} (tried {', '.join(bad) or 'none'}); "
                        f"delete the folder to start the run again")

  def _restore(self, step: int, abstract_trees):
    """Checkpoint ``step``'s trees (packed, or one array per leaf as older code saved them) and meta."""
    if (self.path / str(step) / "packed").is_dir():
      out = self.manager.restore(step, args=ocp.args.Composite(
          packed=ocp.args.StandardRestore(pack(abstract_trees)), meta=ocp.args.JsonRestore()))  # its shapes
      if out["meta"].pop("tree_layout") != layout(abstract_trees):  # another tree whose sizes happen to add up
        raise LayoutMismatch("holds another tree of arrays than this run's")
      return unpack(out["packed"], abstract_trees), out["meta"]
    out = self.manager.restore(step, args=ocp.args.Composite(trees=ocp.args.StandardRestore(abstract_trees),
                                                            meta=ocp.args.JsonRestore()))
    return out["trees"], out["meta"]

  def close(self):
    self.manager.close()


def prepare_workdir(workdir) -> pathlib.Path:
  """Creates ``workdir`` and checks that it is writable (ConfigError, one line, otherwise)."""
  path = pathlib.Path(workdir)
  try:
    path.mkdir(parents=True, exist_ok=True)
    # A probe name of its own: processes of one multi-host run prepare the same folder at once.
    with tempfile.NamedTemporaryFile(dir=path, prefix=".write_test_"):
      pass
  except OSError as e:
    raise ConfigError(f"workdir {str(path)!r} is not writable: {e.strerror}") from None
  return path


def may_resume(ckpt: Checkpointer, workdir: pathlib.Path, config) -> bool:
  """Whether the run in ``workdir`` resumes from ``ckpt`` under ``config.resume``.

  ``never``: no, and the old run's checkpoints move to checkpoints_replaced/ (one line says so) so that a later
  default rerun cannot resume them under the new config.json. ``auto``: only checkpoints whose config.json
  matches the config in everything that changes results (ConfigError naming the keys otherwise; checkpoints
  without a config.json are refused). ``force``: whatever they are.
  """
  if ckpt.latest() is None:
    return False
  if config.resume == "never":
    old = workdir / "checkpoints_replaced"
    ckpt.close()
    shutil.rmtree(old, ignore_errors=True)
    os.replace(ckpt.path, old)
    print(f"resume=never: the workdir's earlier checkpoints moved to {old}", file=sys.stderr)
    ckpt.reopen()
    return False
  if config.resume == "force":
    return True
  cfg_path = workdir / "config.json"
  if not cfg_path.exists():
    raise ConfigError(f"workdir {str(workdir)!r} has checkpoints but no config.json to check them against; "
                      f"use another --workdir or --config.resume=force")
  try:
    saved = json.loads(cfg_path.read_text())
  except ValueError as e:  # a config.json cut short or edited by hand
    raise ConfigError(f"workdir {str(workdir)!r}: its config.json is unreadable ({one_line(e)}); use another "
                      f"--workdir or --config.resume=force") from e
  diff = config_lib.differing_keys(saved, config_lib.flat(config))
  if diff:
    raise ConfigError(f"workdir {str(workdir)!r} holds a run with a different config (differs in: "
                      f"{', '.join(diff)}); use another --workdir or --config.resume=force")
  return True


class FaultInjected(Exception):
  """Raised at the fault point $LASP_FAULT names when $LASP_FAULT_MODE is ``raise`` (an interruption in process)."""


def fault_point(name: str) -> None:
  """Test hook: SIGKILLs this process at the point named by $LASP_FAULT.

  ``LASP_FAULT=probe:1`` dies at the start of the probe after task 1; used by the resume tests to interrupt a run
  exactly where they want. With ``LASP_FAULT_MODE=raise`` it raises FaultInjected instead: the run stops there
  and leaves its workdir as a killed one would, in the same process.
  """
  if os.environ.get("LASP_FAULT") == name:
    if os.environ.get("LASP_FAULT_MODE") == "raise":
      raise FaultInjected(name)
    os.kill(os.getpid(), signal.SIGKILL)
