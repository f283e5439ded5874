"""Files that appear whole or not at all."""

from __future__ import annotations

import os
import pathlib
import tempfile
from typing import Callable, Optional


def write_atomic(path, write: Callable, *, binary: bool = False,
                 before_replace: Optional[Callable[[str], None]] = None) -> None:
  """Calls ``write(f)`` on a temporary file of its own in ``path``'s folder, then renames it over ``path``.

  Readers see the old file or the new one, never part of one; writers in several processes never share a temporary
  file. ``before_replace(tmp)`` runs on the finished temporary file before the rename (e.g. to write its checksum
  first, so whoever finds the file finds its checksum). On any error the temporary file is removed.
  """
  path = pathlib.Path(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb" if binary else "w") as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    if before_replace is not None:
      before_replace(tmp)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
