"""Where a run's time goes: phase totals (``results.json["timing"]``) and the process's compilation seconds.

JAX reports every trace, lowering and backend compile as a duration event; :func:`compile_seconds` is their sum
in this process so far, so a run (or a phase) reads its own share as the difference of two readings.
"""

from __future__ import annotations

import time

import jax

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
_compile = {"seconds": 0.0}


def _listen(event: str, duration: float, **_) -> None:
  if event in COMPILE_EVENTS:
    _compile["seconds"] += duration


jax.monitoring.register_event_duration_secs_listener(_listen)


def compile_seconds() -> float:
  """Seconds this process has spent tracing, lowering and compiling programs."""
  return _compile["seconds"]


def add(timing: dict, phase: str, seconds: float) -> None:
  """Adds ``seconds`` to ``timing[phase]`` (rounded to the millisecond, as results.json keeps them)."""
  timing[phase] = round(timing.get(phase, 0.0) + seconds, 3)


class Phase:
  """``with Phase(timing, "checkpoint_s"):`` adds the block's wall seconds to that phase."""

  def __init__(self, timing: dict, phase: str):
    self.timing, self.phase = timing, phase

  def __enter__(self):
    self.t0 = time.perf_counter()
    return self

  def __exit__(self, *exc):
    add(self.timing, self.phase, time.perf_counter() - self.t0)
