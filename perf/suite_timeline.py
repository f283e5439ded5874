"""A pytest plugin: when each test of an xdist run ends, and on which worker; whether a worker idles at the end.

    python3 -m pytest -q -n 2 --dist loadgroup tests -p perf.suite_timeline   # writes $LASP_SUITE_TIMELINE
    python -m perf.suite_timeline TIMELINE.txt                                # each worker's busy time and last end

The controller writes one ``seconds-since-start worker test-id`` line per finished test to $LASP_SUITE_TIMELINE
(default ``suite_timeline.txt``). Two workers ending far apart mean a long test scheduled last (a tail that
reordering could remove); ending together, the wall time is the tests' sum over the workers.
"""

from __future__ import annotations

import os
import time

_T0 = time.time()


def pytest_runtest_logreport(report):
  node = getattr(report, "node", None)  # set on the controller only: the worker that ran the test
  if report.when != "teardown" or node is None:
    return
  with open(os.environ.get("LASP_SUITE_TIMELINE", "suite_timeline.txt"), "a", encoding="utf-8") as f:
    f.write(f"{time.time() - _T0:.2f} {node.gateway.id} {report.nodeid}\n")


def summary(lines) -> dict:
  """worker -> (its last test's end, its longest single test, that test's id)."""
  out, prev = {}, {}
  for line in lines:
    t, worker, test = line.rstrip("\n").split(" ", 2)
    t = float(t)
    took = t - prev.get(worker, 0.0)
    prev[worker] = t
    _, longest, which = out.get(worker, (0.0, 0.0, ""))
    out[worker] = (t, *((took, test) if took > longest else (longest, which)))
  return out


if __name__ == "__main__":
  from lasp_jax import errors  # noqa: PLC0415  (the plugin, loaded by every pytest worker, needs no lasp_jax)
  (path,) = errors.script_args(1, "python -m perf.suite_timeline TIMELINE.txt", files=(0,))
  with open(path, encoding="utf-8") as f:
    s = summary(f)
  for worker, (end, longest, which) in sorted(s.items()):
    print(f"{worker}: last test ended at {end:.1f} s; longest gap {longest:.1f} s ({which})")
  ends = [end for end, _, _ in s.values()]
  print(f"workers end {max(ends) - min(ends):.1f} s apart")
