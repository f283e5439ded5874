"""Where does accuracy go? Probes of one run against converged references and baselines.

    python -m experiments.diagnose --config=configs/mnist5k.py [--config.seed=1] [--out=FILE.json]

After every task, on the probe's own data (the memory + the current task's
training digits, class-balanced; the test sets of the tasks seen), it reports:

* ``sgd_probe``: the published linear probe (what results.json reports);
* ``lbfgs_encoder``: a converged logistic regression (``linear.fit_logistic``) on
  the same frozen encoder features: if it beats ``sgd_probe``, the probe is the loss;
* ``lbfgs_pixels``: the same classifier on raw pixels (the no-representation baseline);
* and, after the last task, both readouts of the *untrained* encoder on the final
  probe data (what training added at all).

With each task's learning rate (first and last epoch) and loss (first and last
epoch), so a task that did not train shows up.
"""

from __future__ import annotations

import json
import tempfile

import jax
from absl import flags
from ml_collections import config_flags

from lasp_jax import errors, train
from lasp_jax.eval import evaluators, probe
from lasp_jax.platform import xla_cache


def readouts(ctx, carry, t: int, variables) -> dict:
  """{readout: {metric: overall accuracy}} on task t's probe data for these encoder variables."""
  pd = evaluators.probe_data(train.readout_inputs(ctx, carry), t)
  kw = evaluators.readout_kwargs(train.readout_inputs(ctx, carry))
  out = {}
  for name, kind in (("lbfgs_encoder", "encoder"), ("lbfgs_pixels", "pixels")):
    out[name] = probe.linear_readout(ctx.model, variables, carry.data, ctx.test_data, pd, kind=kind, **kw).overall
  return out


def define_flags() -> None:
  """The command's flags (defined only when it runs: tests import this module beside others)."""
  config_flags.DEFINE_config_file("config", None, "Run configuration.", lock_config=True)
  flags.DEFINE_string("out", "", "Write the report as JSON here too.")


def main(argv):
  del argv
  xla_cache.enable("~/.cache/lasp_jax/xla")
  config = flags.FLAGS.config
  config.progress = False
  ctx, carry = train.start(config, tempfile.mkdtemp(prefix="diagnose_"))
  initial = jax.tree.map(lambda x: x.copy(), carry.state.variables())
  res = train.run(ctx, carry, on_task_end=lambda x, c, t: readouts(x, c, t, c.state.variables()))
  last = res["num_tasks"] - 1
  rows = []
  for t in range(res["num_tasks"]):
    curves = [c for c in res["curves"] if c["task"] == t]
    extra = next(e for e in res["extra"] if e["task"] == t)
    sgd = {n: res["acc_matrix"][n][t] for n in res["acc_matrix"]}
    sgd_overall = {n: (sum(v for v in row if v is not None) / sum(v is not None for v in row))
                   for n, row in sgd.items()}
    rows.append(dict(task=t, lr_first=curves[0]["lr"], lr_last=curves[-1]["lr"], loss_first=curves[0]["loss"],
                     loss_last=curves[-1]["loss"], sgd_probe_task_mean=sgd_overall,
                     **{k: v for k, v in extra.items() if k != "task"}))
  untrained = readouts(ctx, carry, last, initial)
  # The SGD probe of the untrained encoder, on the same final probe data.
  carry.state = carry.state.replace(params=initial["params"], batch_stats=initial["batch_stats"])
  train.evaluate_task(ctx, carry, last)
  untrained["sgd_probe"] = {n: carry.rs.overall[n][last] for n in carry.rs.overall}
  report = dict(method=config.method, final_sgd_probe=res["final"], tasks=rows,
                untrained_encoder_final=untrained, wall_time_s=res["wall_time_s"])
  text = json.dumps(report, indent=1, default=float)
  r = lambda d: "/".join(f"{v:.1f}" for v in d.values())
  print(f"final: sgd_probe {r(res['final'])}  lbfgs_encoder {r(rows[-1]['lbfgs_encoder'])}  "
        f"lbfgs_pixels {r(rows[-1]['lbfgs_pixels'])}  untrained lbfgs {r(untrained['lbfgs_encoder'])}  "
        f"per-task loss first->last {[(round(x['loss_first'], 2), round(x['loss_last'], 2)) for x in rows]}  "
        f"{res['wall_time_s']:.0f} s")
  if flags.FLAGS.out:
    with open(flags.FLAGS.out, "w") as f:
      f.write(text)


if __name__ == "__main__":
  define_flags()
  flags.mark_flags_as_required(["config"])
  errors.run_app(main)
