"""Per-layer roofline of the race's train step: each matmul and convolution of its program, timed alone.

    python -m perf.layer_roofline [--net=mnistnet|resnet18] [--batch=512] [--out=FILE.json]

The step is the CPU race's (perf/cpu_race.py: current model forward and backward, past model forward, two views,
SupCon + IRD, SGD). Every distinct ``dot_general`` and ``conv_general_dilated`` of its traced program runs alone,
compiled with the step's XLA options, on random inputs of its shapes. For each: its FLOPs (perf/roofline.py's
count), the bytes it must move at least (its inputs and its output once each), and its roofline bound,
max(FLOPs / matmul rate, bytes / stream bandwidth), both rates measured in the same run. Printed: each op's
time, GFLOP/s, share of the matmul rate and of its own bound; then the step's share of the matmul rate as it
runs, and the share it would reach if every op ran at its bound (alone, and with the rest of the step as it is).
One run, one machine: figures to compare, not to assert.
"""

from __future__ import annotations

from absl import flags, logging

from lasp_jax import errors, provenance
from lasp_jax.loop.checkpoint import write_json_atomic
from lasp_jax.platform import xla_cache
from perf import cpu_race, roofline

_NET = flags.DEFINE_enum("net", "mnistnet", list(cpu_race.NETS), "The network of the step.")
_BATCH = flags.DEFINE_integer("batch", 512, "Images per step (two views each).", lower_bound=1)
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per op; the median counts.", lower_bound=1)
_OUT = flags.DEFINE_string("out", "", "JSON output (optional).")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  xla_cache.enable()
  net, batch = _NET.value, _BATCH.value
  peak, bw = roofline.matmul_peak_gflops(), roofline.stream_gbps()
  race = cpu_race.race_chunk(net, batch, 1)
  ctx, carry, chunk, mask, lrs, past = race
  ops = roofline.matmul_ops(ctx.chunk_fn.trace(carry.state, past, mask, carry.data, chunk, lrs).jaxpr)
  rows = sorted((roofline.op_row(e, n, ctx.compiler_options, peak, bw, _REPEATS.value) for e, n in ops),
                key=lambda r: -r["ms"] * r["count"])
  step_s = roofline.median_seconds(cpu_race.call_of(*race), (), _REPEATS.value)
  useful = cpu_race.step_gflop(net, batch)  # the arithmetic the step needs (XLA's own gradients' FLOPs)
  ops_ms = sum(r["ms"] * r["count"] for r in rows)
  bound_ms = sum(r["bound_ms"] * r["count"] for r in rows)
  rest_ms = max(step_s * 1e3 - ops_ms, 0.0)
  ideal = useful / peak * 1e3  # ms at the matmul rate
  summary = {"net": net, "batch": batch, "matmul_gflops": peak, "stream_gbps": bw, "step_ms": step_s * 1e3,
             "useful_gflop": useful, "ops_ms": ops_ms, "rest_ms": rest_ms, "ops_bound_ms": bound_ms,
             "share_now": ideal / (step_s * 1e3), "share_ops_at_bound": ideal / bound_ms,
             "share_ops_at_bound_rest_as_is": ideal / (bound_ms + rest_ms)}
  print(f"{net}, batch {batch} (two views): matmul rate {peak:.1f} GFLOP/s, stream {bw:.1f} GB/s")
  print(f"{'op':<22}{'count':>6}{'GFLOP':>8}{'MB':>8}{'FLOP/B':>8}{'ms':>9}{'GFLOP/s':>9}{'of rate':>9}"
        f"{'bound ms':>10}{'of bound':>9}  shapes -> out")
  for r in rows:
    print(f"{r['op']:<22}{r['count']:>6}{r['gflop']:>8.3f}{r['mb']:>8.1f}{r['flop_per_byte']:>8.1f}{r['ms']:>9.2f}"
          f"{r['gflops']:>9.1f}{r['of_peak']:>9.0%}{r['bound_ms']:>10.2f}{r['of_bound']:>9.0%}  "
          f"{r['shapes']} -> {r['out']}")
  print(f"step {summary['step_ms']:.1f} ms: its matmuls and convolutions alone {ops_ms:.1f} ms (at their bounds "
        f"{bound_ms:.1f}), the rest {rest_ms:.1f} ms; {useful:.2f} GFLOP needed = {ideal:.1f} ms at the matmul rate")
  print(f"share of the matmul rate: now {summary['share_now']:.0%}; every op at its bound and nothing else "
        f"{summary['share_ops_at_bound']:.0%}; every op at its bound, the rest as it is "
        f"{summary['share_ops_at_bound_rest_as_is']:.0%}")
  if _OUT.value:
    write_json_atomic(_OUT.value, {"summary": summary, "ops": rows, "provenance": provenance.provenance()})


if __name__ == "__main__":
  errors.run_app(main)
