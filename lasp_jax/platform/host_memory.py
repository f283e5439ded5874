"""Host memory for XLA:CPU runs: freed blocks stay in the process instead of going back to the OS.

XLA:CPU allocates a compiled call's temporary buffer with malloc at every call (216 MB for the R-MNIST step at
batch 512). glibc serves a block that large with a fresh mmap, from a thread's own arena, and unmaps it on free,
so every call page-faults the whole buffer again: 55,000 minor faults, ~50 ms of a 300 ms one-step call on a
2-core Intel Xeon. Small epochs run many such calls (a later domain of the evidence config: one full step and a
short one per epoch). One arena, no mmap and no trimming below 2 GB make the next call reuse the freed pages:
no faults, the same results (only where memory comes from changes), a little more resident memory
(BENCHMARKS.md). The programs set it first thing (lasp_jax.main, experiments/, perf/, the tests' conftest),
before JAX's backend starts (a process that has run XLA computations already keeps the arenas its threads
took); importing lasp_jax changes nothing. glibc (Linux) only; elsewhere, or
with LASP_KEEP_FREED_MEMORY=0, nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -4, -8
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2 ** 31 - 1), (M_TOP_PAD, 1 << 28))


def keep_freed_memory() -> bool:
  """Sets SETTINGS with mallopt; True where they took. Call it before JAX's first computation: XLA's threads take
  their malloc arenas then."""
  if os.environ.get("LASP_KEEP_FREED_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
    return False
  try:
    mallopt = ctypes.CDLL("libc.so.6").mallopt
  except (OSError, AttributeError):  # not glibc (musl has no mallopt)
    return False
  mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
  return all(mallopt(param, value) == 1 for param, value in SETTINGS)
