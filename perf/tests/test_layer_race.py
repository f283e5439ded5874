"""perf/layer_race.py: the R-MNIST race step split into its layers, each timed alone."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lasp_jax.data import augment
from perf import cpu_race, hlo_cost, layer_race, roofline


@pytest.mark.parametrize("net,batch", [("mnistnet", 4), ("resnet18", 2)])
def test_layers_compose_to_the_model_and_count_the_step_flops(net, batch):
  """The layers applied in turn, each to its share of the model's variables, are the model's embedding, and their
  FLOPs (train and past parts, and the loss) with the views' add up to the whole step's count: nothing left out,
  nothing twice."""
  ctx, carry = cpu_race.race_chunk(net, batch, 1)[:2]
  programs = layer_race.layer_programs(ctx, carry, plain=True)
  variables = carry.state.variables()
  image = (28, 28, 1) if net == "mnistnet" else (32, 32, 3)
  x = jax.random.uniform(jax.random.PRNGKey(0), (2 * batch, *image))
  h = x
  for name, (fn, _) in layer_race.layer_fns(ctx.config, "xla").items():
    h = fn(layer_race.layer_variables(variables, name), h, True)
  _, z = ctx.model.apply(variables, x, train=True, mutable=["batch_stats"])[0]
  np.testing.assert_allclose(h, z, rtol=1e-5, atol=1e-6)
  counted = sum(roofline.jaxpr_flops(jax.make_jaxpr(fn)(*args)) for calls in programs.values() for fn, args in calls)
  # The augmentation's matmuls (resampling, colour) belong to no layer.
  images = jnp.zeros((batch, *image), jnp.uint8)
  views = roofline.jaxpr_flops(jax.make_jaxpr(lambda u: augment.two_views(
      jax.random.PRNGKey(0), u, jnp.zeros(batch), ctx.aug_cfg, rows=batch))(images))
  assert views > 0 and counted + views == pytest.approx(cpu_race.step_gflop(net, batch) * 1e9, rel=1e-9)


def test_summarize_hand_values():
  """Each layer at the faster side; the three shares are the step's FLOPs at the matmul rate over each time."""
  jax_rows = {n: {"gflop": 1.0, "ms": 10.0, "bound_ms": 4.0} for n in layer_race.LAYERS["mnistnet"]}
  torch_ms = {"conv1": 5.0, "conv2": 20.0, "fc": 10.0, "head": 12.0, "loss": 1.0}
  s = layer_race.summarize(jax_rows, torch_ms, step_ms=80.0, useful_gflop=5.0, peak=250.0)  # 20 ms at the rate
  faster = {r["layer"]: r["faster"] for r in s["rows"]}
  assert faster == {"conv1": "torch", "conv2": "lasp_jax", "fc": "lasp_jax", "head": "lasp_jax", "loss": "torch"}
  assert s["layers_ms"] == 50.0 and s["best_ms"] == 36.0 and s["rest_ms"] == 30.0 and s["torch_layers_ms"] == 48.0
  assert s["ms_at_60_percent"] == pytest.approx(20 / 0.6)
  assert (s["share_now"], s["share_layers"], s["share_bounds"]) == (0.25, 0.4, 1.0)
  assert s["share_best"] == pytest.approx(20 / 36)
  assert s["rows"][0]["best_of_rate"] == pytest.approx(4 / 5)  # conv1: 1 GFLOP = 4 ms at the rate, in 5 ms
  alone = layer_race.summarize(jax_rows, {}, 80.0, 5.0, 250.0)  # no PyTorch side: ours
  assert alone["best_ms"] == 50.0 and alone["torch_layers_ms"] is None


def test_bound_hand_values():
  """A program's bound: each instruction at its FLOPs over the rate or its bytes over the bandwidth, the larger."""
  costs = {"copy": hlo_cost.Cost("fusion", bytes=10 ** 9, flops=0.0, shape="f32[1]"),
           "dot": hlo_cost.Cost("dot", bytes=10 ** 6, flops=2e12, shape="f32[1]")}
  assert layer_race.bound_ms(costs, peak=1000.0, bw=10.0) == pytest.approx(100.0 + 2000.0)


def test_a_missing_torch_python_is_one_line_and_exit_2_before_measuring():
  proc = subprocess.run([sys.executable, "-m", "perf.layer_race", "--torch_python=/nonexistent/python"],
                        capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 2 and proc.stdout == ""
  # The last line: a machine's JAX may log a line of its own before it.
  assert proc.stderr.strip().splitlines()[-1] == ("perf.layer_race: --torch_python=/nonexistent/python is not an "
                                                  "executable file") and "Traceback" not in proc.stderr
