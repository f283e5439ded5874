"""host_memory.keep_freed_memory: a freed large block is reused by the next allocation, not page-faulted afresh."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO

# A fresh process that imports MODULE: 64 MB malloc'd, written and freed three times; the minor page faults of
# each round. glibc's defaults serve the block by mmap and unmap it on free (16,384 fresh 4 kB pages every round).
PROGRAM = """
import ctypes, importlib, json, resource, sys
import lasp_jax.platform.host_memory
importlib.import_module(sys.argv[1])  # lasp_jax.main sets it, unless LASP_KEEP_FREED_MEMORY=0
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
faults = []
for _ in range(3):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  p = libc.malloc(64 << 20)
  ctypes.memset(p, 1, 64 << 20)
  libc.free(p)
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": lasp_jax.platform.host_memory.keep_freed_memory(), "faults": faults}))  # sets it if not yet
"""


def _faults(keep: str, module: str = "lasp_jax.main") -> dict:
  env = dict(os.environ, LASP_KEEP_FREED_MEMORY=keep)
  out = subprocess.run([sys.executable, "-c", PROGRAM, module], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_freed_large_block_is_reused_without_page_faults():
  off, on = _faults("0"), _faults("1")
  assert off["kept"] is False
  if not on["kept"]:  # not glibc: nothing to check but that malloc was left alone
    return
  assert min(off["faults"]) > 10_000  # every round maps 64 MB afresh
  assert max(on["faults"][1:]) < 100  # the first round maps it; later rounds reuse its pages


def test_importing_the_library_leaves_malloc_alone():
  """Only the programs (lasp_jax.main, experiments, perf, the tests) set it: a loop of one's own that imports the
  losses keeps glibc's defaults."""
  lib = _faults("1", module="lasp_jax.method.losses")
  if not lib["kept"]:
    return
  assert min(lib["faults"]) > 10_000
