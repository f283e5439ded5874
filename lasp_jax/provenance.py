"""Where a number came from: code version, library versions and device, for results.json and config.json."""

from __future__ import annotations

import datetime
import functools
import os
import pathlib
import platform
import socket
import subprocess

import jax
import jaxlib

REPO = pathlib.Path(__file__).resolve().parents[1]


def _git(*args: str, root: pathlib.Path = REPO):
  try:
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True)
    return out.stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None


def cpu_model(cpuinfo: str | None = None) -> str:
  """The host CPU as "name (family F model M; widest SIMD)", from /proc/cpuinfo where there is one.

  CPU timings differ by 2x between the machines this project has run on (an AVX-512 Xeon, a Zen 1
  EPYC with AVX2 only) and "AMD EPYC" alone does not say which, so figures carry this.
  """
  if cpuinfo is None:
    try:
      cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
      return platform.processor() or platform.machine()
  first = dict(line.split(":", 1) for line in cpuinfo.split("\n\n")[0].splitlines() if ":" in line)
  first = {k.strip(): v.strip() for k, v in first.items()}
  flags = set(first.get("flags", "").split())
  simd = next((name for flag, name in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx")) if flag in flags),
              "sse")
  simd += ", amx" if "amx_tile" in flags else ""
  return (f"{first.get('model name', platform.machine())} "
          f"(family {first.get('cpu family', '?')} model {first.get('model', '?')}; {simd})")


def code_dirty(root: pathlib.Path = REPO) -> bool | None:
  """Whether tracked files other than ``results/`` differ from the commit (None outside a checkout): a study
  rewrites its own results files while its runs go on, which leaves the code the commit's."""
  status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results", root=root)
  return None if status is None else bool(status)


@functools.lru_cache(maxsize=1)
def _static() -> dict:
  commit = _git("rev-parse", "HEAD")
  devices = jax.devices()
  return {"git_commit": commit, "git_dirty": code_dirty() if commit else None,
          "jax": jax.__version__, "jaxlib": jaxlib.__version__, "python": platform.python_version(),
          "platform": devices[0].platform, "device_kind": devices[0].device_kind, "device_count": len(devices),
          "cpu": cpu_model(), "host": socket.gethostname(),
          # XLA:CPU's thread count and instruction set change float summation order, hence a run's digits.
          "xla_flags": os.environ.get("XLA_FLAGS", "")}


def provenance() -> dict:
  """git commit and dirty flag (None outside a checkout), jax/jaxlib versions, device kind and count, host CPU
  and host name, the XLA_FLAGS the process ran under, and the UTC date and time of the call (a results file says
  when it was written)."""
  return {**_static(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
