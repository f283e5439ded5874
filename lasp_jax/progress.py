"""Progress bars for the long phases of a run (training epochs, the probe, the raw-pixel fit).

A bar appears only after ``DELAY`` seconds, so short phases stay silent; ``enable(False)``
(``--config.progress=False``) silences every bar.
"""

from __future__ import annotations

import sys

import tqdm

DELAY = 2.0
_state = {"enabled": True, "bar": None}


def enable(on: bool) -> None:
  _state["enabled"] = bool(on)


def bar(total: int, desc: str, unit: str = "it") -> tqdm.tqdm:
  """A tqdm bar on stderr that shows after DELAY seconds; also the target of :func:`tick`."""
  b = tqdm.tqdm(total=total, desc=desc, unit=unit, delay=DELAY, leave=False, file=sys.stderr,
                disable=not _state["enabled"])
  _state["bar"] = b
  return b


def tick(*_) -> None:
  """Advances the current bar by one (a host callback from inside a compiled loop, or an optimizer's)."""
  b = _state["bar"]
  if b is not None and not b.disable:
    b.update(1)
