"""How the health checks read on every shipped run: each check's firings, and how many of them fall in a task whose
embeddings coincide or whose gradient vanished (a collapse by the two checks that measure the representation
itself), under the checks as they were recorded and as ``health.recheck`` reads the same curves today.

    python -m experiments.flag_audit [--root=results] [--out=results/health_audit.md]
"""

from __future__ import annotations

import collections
import json
import pathlib

from absl import app, flags

from experiments import aggregate
from lasp_jax import errors
from lasp_jax.eval import health
from lasp_jax.loop.checkpoint import write_text_atomic

FLAGS = flags.FLAGS
COLLAPSE = ("embedding_variance", "grad_vanished")


def audit(root: pathlib.Path) -> dict:
  """{"runs": n, "recorded"/"today": {check: (fires, fires in a collapsed task, collapsed tasks it caught)},
  "collapsed_tasks": n, "unflagged_today": [(path, checks recorded, final)]}."""
  counts = {v: collections.defaultdict(lambda: [0, 0]) for v in ("recorded", "today")}
  collapsed_tasks, runs, cleared = 0, 0, []
  caught = {v: collections.Counter() for v in counts}
  for path in sorted(root.glob("**/results.json")):
    res = json.loads(path.read_text())
    if "curves" not in res or "health" not in res:
      continue
    runs += 1
    recorded = {(f["check"], f["task"]) for f in res["health"]["flags"]}
    today = {(f.check, f.task) for f in health.recheck(res)}
    down = {t for c, t in recorded | today if c in COLLAPSE}
    collapsed_tasks += len(down)
    for version, found in (("recorded", recorded), ("today", today)):
      for check, task in found:
        counts[version][check][0] += 1
        counts[version][check][1] += task in down
      for check in {c for c, _ in found}:
        caught[version][check] += len({t for c, t in found if c == check} & down)
    if recorded and not today:
      cleared.append((str(path.relative_to(root)), sorted({c for c, _ in recorded}), res.get("final")))
  table = {v: {c: (n, k, caught[v][c]) for c, (n, k) in sorted(counts[v].items())} for v in counts}
  return {"runs": runs, **table, "collapsed_tasks": collapsed_tasks, "unflagged_today": cleared}


DEFAULT_RUN = "readme/seeds_0-2/seed_0/results.json"  # the README's command 1, SD seed 0


def default_run_task1(root: pathlib.Path) -> list[str]:
  """The default command's SD run at task 1, where the recorded supcon_constant fired."""
  path = root / DEFAULT_RUN
  if not path.exists():
    return []
  res = json.loads(path.read_text())
  rows = [c for c in res["curves"] if c["task"] == 1]
  a11 = res["acc_matrix"]["class_il"][1][1]
  return [f"## The default command's SD run, task 1 (`{DEFAULT_RUN}`)", "",
          f"SupCon {rows[0]['supcon']:.2f} in its first epoch and {rows[-1]['supcon']:.2f} in its last, against a "
          f"constant embedding's {rows[-1]['supcon_const']:.2f}; embedding variance {rows[-1]['z_var']:.2f}; "
          f"task 1's classes read out at {a11:.1f} % Class-IL right after it. Flags as recorded: "
          f"{', '.join(res['health']['checks']) or 'none'}; today: "
          f"{', '.join(sorted({f.check for f in health.recheck(res)})) or 'none'}.", ""]


def markdown(a: dict, root: pathlib.Path) -> str:
  rows = []
  for check in sorted(set(a["recorded"]) | set(a["today"])):
    for version in ("recorded", "today"):
      n, k, c = a[version].get(check, (0, 0, 0))
      rows.append([check, version, n, k, f"{100 * k / n:.0f} %" if n else "–",
                   f"{c} of {a['collapsed_tasks']}"])
  lines = ["# Health checks on every shipped run", "",
           "Produced by `python -m experiments.flag_audit`. A firing is one (check, task) of a run; it counts as in a",
           "collapsed task when that task also has `embedding_variance` (the embeddings of a batch coincide) or",
           "`grad_vanished` (the gradient fell under 1e-3 of the run's largest). `recorded`: the flags as the run",
           "wrote them; `today`: `health.recheck` on the same curves with the current checks.", "",
           f"{a['runs']} runs, {a['collapsed_tasks']} collapsed tasks.", "",
           aggregate.markdown_table(["check", "checks", "firings", "in a collapsed task", "precision",
                                     "collapsed tasks it flags (recall)"], rows), "",
           f"## Runs flagged as recorded and healthy today ({len(a['unflagged_today'])})", "",
           aggregate.markdown_table(["run", "recorded checks", "final accuracy"],
                                    [[p, ", ".join(c), json.dumps(f)] for p, c, f in a["unflagged_today"]]), "",
           *default_run_task1(root)]
  return "\n".join(lines)


def main(argv):
  del argv
  root = pathlib.Path(FLAGS.root)
  if not root.is_dir():
    raise app.UsageError(f"--root {root} is not a folder")
  text = markdown(audit(root), root)
  write_text_atomic(pathlib.Path(FLAGS.out), text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_string("root", "results", "The folder whose results.json files are read.")
  flags.DEFINE_string("out", "results/health_audit.md", "The markdown table written.")
  errors.run_app(main)
