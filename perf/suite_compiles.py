"""A pytest plugin: where the suite's time goes, per test, the XLA compiles of its own process.

    python3 -m pytest -q -n 2 --dist loadgroup tests --durations=0 -p perf.suite_compiles
    python -m perf.suite_compiles DIR DURATIONS.txt     # the summary, from the workers' files and pytest's output

Each worker writes ``DIR/compiles_<worker>.json`` (DIR: $LASP_SUITE_COMPILES, default the working directory):
one ``[test id, program, seconds]`` row per backend compile, read from ``jax_log_compiles``' "Finished XLA
compilation of NAME in T sec" lines. Cache hits and the compiles of the tests' subprocesses are not counted. The
summary prints the totals by duration and by program, and the longest tests with their compile seconds.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pathlib
import re

from lasp_jax import errors

_FINISHED = re.compile(r"Finished XLA compilation of (.*) in ([0-9.e-]+) sec")
_TEST = {"id": None}
_ROWS: list = []


class _Compiles(logging.Handler):
  def emit(self, record):
    m = _FINISHED.search(record.getMessage())
    if m:
      _ROWS.append((_TEST["id"], m.group(1), float(m.group(2))))


def pytest_runtest_setup(item):
  if _TEST["id"] is None:  # jax first imported by the tests (conftest sets XLA_FLAGS before)
    import jax  # noqa: PLC0415
    jax.config.update("jax_log_compiles", True)
    log = logging.getLogger("jax")
    log.addHandler(_Compiles())
    log.propagate = False  # jax_log_compiles' lines go to the handler only, not into every test's output
  _TEST["id"] = item.nodeid


def pytest_unconfigure(config):
  if _TEST["id"] is not None:
    out = pathlib.Path(os.environ.get("LASP_SUITE_COMPILES", "."))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (out / f"compiles_{worker}.json").write_text(json.dumps(_ROWS))


_BINS = [("<0.2 s", 0.2), ("0.2-1 s", 1), ("1-3 s", 3), ("3-10 s", 10), (">10 s", float("inf"))]


def _bin(seconds: float) -> str:
  return next(b for b, top in _BINS if seconds < top)


def summary(rows, durations: dict, longest: int = 40) -> list[str]:
  bins = collections.defaultdict(lambda: [0, 0.0])
  programs = collections.defaultdict(lambda: [0, 0.0])
  per_test = collections.defaultdict(float)
  for test, program, s in rows:
    b = bins[_bin(s)]
    b[0] += 1
    b[1] += s
    if s > 1:
      programs[program][0] += 1
      programs[program][1] += s
    per_test[test] += s
  lines = [f"in-process backend compiles: {len(rows)}, {sum(r[2] for r in rows):.1f} s; the tests' summed durations "
           f"{sum(durations.values()):.1f} s",
           "by duration (count, s): " + ", ".join(f"{b} {bins[b][0]} {bins[b][1]:.1f}" for b, _ in _BINS if b in bins),
           "compiles over 1 s by program (s, count): " + ", ".join(
               f"{p} {s:.1f} ({c})" for p, (c, s) in sorted(programs.items(), key=lambda x: -x[1][1])),
           f"the {longest} longest tests: duration (setup + call + teardown), of it in-process compile, test"]
  lines += [f"{d:7.2f} {per_test.get(t, 0.0):6.1f} {t}"
            for t, d in sorted(durations.items(), key=lambda x: -x[1])[:longest]]
  return lines


def durations_of(text: str) -> dict:
  """pytest's ``--durations=0`` lines, summed per test."""
  out = collections.defaultdict(float)
  for m in re.finditer(r"^([0-9.]+)s (?:setup|call|teardown)\s+(\S+)", text, re.M):
    out[m.group(2)] += float(m.group(1))
  return dict(out)


if __name__ == "__main__":
  folder, durations = errors.script_args(2, "python -m perf.suite_compiles DIR DURATIONS.txt", files=(0, 1))
  rows = [r for f in sorted(pathlib.Path(folder).glob("compiles_*.json")) for r in json.loads(f.read_text())]
  print("\n".join(summary(rows, durations_of(pathlib.Path(durations).read_text()))))
