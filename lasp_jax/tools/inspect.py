"""Shows a config's task stream: split, memory counts per boundary, augmented views.

    python -m lasp_jax.tools.inspect --config=configs/mnist5k.py [--out=views.png]
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from ml_collections import config_flags
from PIL import Image

from lasp_jax import config_lib, errors
from lasp_jax.data import augment
from lasp_jax.data import memory as memory_lib


def describe(config, stream) -> str:
  lines = [f"{config.dataset}: {type(stream).__name__}, {stream.num_tasks} tasks"]
  mem = memory_lib.Memory.empty()
  for t in range(stream.num_tasks):
    if t > 0:
      mem = stream.update_memory(mem, task=t, capacity=config.memory.size, seed=config.seed)
    own = stream.train_indices(t)
    extra = f" angle {stream.angles[t]:.1f}" if stream.rotates else ""
    lines.append(f"task {t}: classes {stream.task_classes(t).tolist()}{extra}, {len(own)} train, "
                 f"{len(stream.test_indices(t))} test, memory {len(mem)}")
    if len(mem):
      groups = stream.probe_groups(stream.memory_domains(mem), stream.train_labels[mem.indices])
      lines.append(f"    memory per {'domain' if stream.rotates else 'class'}: "
                   f"{ {int(g): int(n) for g, n in zip(*np.unique(groups, return_counts=True))} }")
  return "\n".join(lines)


def view_grid(config, dataset, stream, pairs: int) -> Image.Image:
  """Rows of (view 1, view 2) pairs, de-normalized to uint8."""
  cfg = config_lib.augment_config(config, rotate=stream.rotates)
  rng = np.random.default_rng(config.seed)
  idx = rng.choice(len(stream.train_labels), pairs, replace=False)
  angles = jnp.asarray(stream.angles[rng.integers(0, stream.num_tasks, pairs)], jnp.float32)
  views = augment.two_views(jax.random.PRNGKey(config.seed), jnp.asarray(dataset.train_images[idx]), angles, cfg)
  views = np.asarray(views)
  if cfg.mean is not None:
    views = views * np.asarray(cfg.std) + np.asarray(cfg.mean)
  views = (np.clip(views, 0, 1) * 255).astype(np.uint8)
  if views.shape[-1] == 1:
    views = np.repeat(views, 3, -1)
  pairs_img = np.concatenate([views[:pairs], views[pairs:]], axis=2)  # side by side
  cols = 4
  rows = -(-pairs // cols)
  pad = np.zeros((rows * cols - pairs,) + pairs_img.shape[1:], np.uint8)
  tiles = np.concatenate([pairs_img, pad]).reshape(rows, cols, *pairs_img.shape[1:])
  tiles = np.pad(tiles, ((0, 0), (0, 0), (2, 2), (2, 2), (0, 0)), constant_values=255)
  grid = tiles.transpose(0, 2, 1, 3, 4).reshape(rows * tiles.shape[2], cols * tiles.shape[3], 3)
  return Image.fromarray(grid).resize((grid.shape[1] * 3, grid.shape[0] * 3), Image.NEAREST)


def define_flags() -> None:
  """The command's flags (defined only when it runs: tests import this module beside others)."""
  config_flags.DEFINE_config_file("config", None, "Run configuration file.", lock_config=True)
  flags.DEFINE_string("out", "augmented_views.png", "PNG grid of augmented view pairs.")
  flags.DEFINE_integer("pairs", 16, "How many samples (each shown as its two views).", lower_bound=1)


def main(argv):
  del argv
  from lasp_jax.data import streams  # noqa: PLC0415  (jax: after flag parsing)
  try:
    config = flags.FLAGS.config
    config_lib.validate(config)
    dataset, stream = streams.load(config)
  except (OSError, ImportError, SyntaxError, AttributeError) as e:  # missing data (a LaspError: errors.run_app)
    print(f"error: {errors.one_line(e)}", file=sys.stderr)
    sys.exit(2)
  print(describe(config, stream))
  view_grid(config, dataset, stream, flags.FLAGS.pairs).save(flags.FLAGS.out)
  print(f"augmented view pairs: {flags.FLAGS.out}")


if __name__ == "__main__":
  define_flags()
  flags.mark_flags_as_required(["config"])
  errors.run_app(main)
