"""A run's checkpoint save, packed (one array per dtype, lasp_jax.loop.checkpoint) against one array per leaf.

    python -m perf.checkpoint_save [--config=configs/tiny.py] [--saves=15]

The trees are those of the config's run (train state and past model) as it starts; each form saves them
``--saves`` times into its own folder through Orbax (as a run does: then waits for the write). Prints the median
wall and CPU milliseconds per save (the first two, Orbax's warm-up, left out) and the ratio. Pause background work.
"""

from __future__ import annotations

import pathlib
import tempfile
import time

import jax
import numpy as np
from absl import flags, logging
from ml_collections import config_flags

from lasp_jax import errors, provenance, train
from lasp_jax.loop import checkpoint, context

_CONFIG = config_flags.DEFINE_config_file("config", "configs/tiny.py", "the run whose trees are saved")
_SAVES = flags.DEFINE_integer("saves", 15, "saves per form (the first two are left out)", lower_bound=3)


def _per_leaf(ckpt: checkpoint.Checkpointer, trees, step: int) -> None:
  """The form before packing: Orbax's StandardSave of the trees as they are."""
  ocp = checkpoint.ocp
  ckpt.manager.save(step, args=ocp.args.Composite(trees=ocp.args.StandardSave(trees), meta=ocp.args.JsonSave({})))
  ckpt.manager.wait_until_finished()


def _timed(save, folder: pathlib.Path, trees) -> tuple[float, float]:
  """Median wall and CPU milliseconds of ``save(checkpointer, trees, step)`` after two warm-up saves."""
  ckpt, wall, cpu = checkpoint.Checkpointer(folder), [], []
  for step in range(1, _SAVES.value + 1):
    t, c = time.perf_counter(), time.process_time()
    save(ckpt, trees, step)
    wall.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
  ckpt.close()
  return 1e3 * float(np.median(wall[2:])), 1e3 * float(np.median(cpu[2:]))


def main(_):
  logging.set_verbosity(logging.WARNING)  # Orbax's INFO lines, several a save
  root = pathlib.Path(tempfile.mkdtemp())
  _, carry = train.build(_CONFIG.value, root / "run")
  trees = context._trees(carry)  # pylint: disable=protected-access
  leaves = jax.tree.leaves(trees)
  p = provenance.provenance()
  print(f"{p['cpu']}, commit {(p['git_commit'] or 'none')[:7]}, {p['date']}; {len(leaves)} leaves, "
        f"{sum(x.size for x in leaves):,} values; median of {_SAVES.value - 2} saves")
  leaf = _timed(_per_leaf, root / "per_leaf", trees)
  packed = _timed(lambda c, t, _: c.save(t, {}), root / "packed", trees)
  for name, (wall, cpu) in [("one array per leaf", leaf), ("packed", packed)]:
    print(f"{name:20s} {wall:7.1f} ms wall {cpu:7.1f} ms CPU")
  print(f"per leaf / packed: {leaf[0] / packed[0]:.2f}x wall, {leaf[1] / packed[1]:.2f}x CPU")


if __name__ == "__main__":
  errors.run_app(main)
