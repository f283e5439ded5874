"""Where a number came from: code version, library versions and device, for results.json and config.json."""

from __future__ import annotations

import functools
import pathlib
import platform
import subprocess

import jax

REPO = pathlib.Path(__file__).resolve().parents[1]


def _git(*args: str):
  try:
    out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10, check=True)
    return out.stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None


@functools.lru_cache(maxsize=1)
def provenance() -> dict:
  """git commit and dirty flag (None outside a checkout), jax/jaxlib versions, device kind and count."""
  import jaxlib  # pylint: disable=g-import-not-at-top
  commit = _git("rev-parse", "HEAD")
  status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
  devices = jax.devices()
  return {"git_commit": commit, "git_dirty": None if status is None else bool(status),
          "jax": jax.__version__, "jaxlib": jaxlib.__version__, "python": platform.python_version(),
          "platform": devices[0].platform, "device_kind": devices[0].device_kind, "device_count": len(devices)}
