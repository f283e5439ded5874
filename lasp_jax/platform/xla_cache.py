"""JAX's persistent compilation cache: compiled programs reused across processes.

A small-scale run spends about half of its wall time compiling (train chunk,
search, probe); runs that differ only in seed, memory size or data compile to
the same programs, so an experiment grid or a rerun pays compilation once.
"""

from __future__ import annotations

import os
import sys

import jax

DEFAULT_DIR = "~/.cache/lasp_jax/xla"


def enable(path: str = DEFAULT_DIR, min_compile_secs: float = 0.5) -> str | None:
  """Turns the cache on at ``path`` unless one is configured already; returns the directory in use.

  An empty ``path`` leaves the cache off. A cache directory that cannot be
  created only costs speed, so it is one warning line on stderr rather than a failed run (on stderr, not the
  log: the command line logs errors only).
  """
  current = jax.config.jax_compilation_cache_dir  # set by JAX_COMPILATION_CACHE_DIR, e.g. in tests
  if current or not path:
    return current or None
  path = os.path.expanduser(path)
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    print(f"warning: compilation cache off: cannot create {path} ({e.strerror or e})", file=sys.stderr)
    return None
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_secs)
  return path
