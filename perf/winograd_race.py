"""ResNet-18's train step with its 3x3 stride-1 convolutions as Winograd F(2x2) / F(4x4) against the direct
convolutions and against PyTorch's fastest layout, in one run on this machine.

    python -m perf.winograd_race --torch_python=PY [--batch=32] [--rounds=3]

The step is perf.cpu_race's (Co2L with the past model, two views augmented on the device, SupCon + IRD, SGD) at
``model.winograd`` 0, 2 and 4, timed in interleaved rounds (median of each variant's rounds), then
perf/torch_cpu_race.py under PY in NCHW and channels_last, one process at a time after lasp_jax's timing. Also
each stage's 3x3 convolution alone (forward and both gradients, the step's batch of two views): direct
(the model's conv function, ``conv.conv_grad_conv``) against F(2x2) and F(4x4). Prints one JSON line.
"""

from __future__ import annotations

import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from lasp_jax import errors
from lasp_jax.model import conv as conv_lib
from lasp_jax.model import winograd
from perf import cpu_race, roofline

_TORCH = flags.DEFINE_string("torch_python", "", "A python with torch + torchvision (the peer); '' = lasp_jax only.")
_BATCH = flags.DEFINE_integer("batch", 32, "Samples per step (two views each).", lower_bound=1)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds of every lasp_jax variant.", lower_bound=1)
_TORCH_STEPS = flags.DEFINE_integer("torch_steps", 3, "PyTorch timed steps per variant.", lower_bound=1)

VARIANTS = (0, 2, 4)
# ResNet-18 on 32x32 images: each stage's 3x3 stride-1 convolution (side, channels).
STAGES = ((32, 64), (16, 128), (8, 256), (4, 512))


def conv_seconds(fn, side: int, channels: int, images: int) -> float:
  """Median seconds of one 3x3 convolution's forward and both gradients (a vjp) on ``images`` images."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((images, side, side, channels)), jnp.float32)
  k = jnp.asarray(rng.standard_normal((3, 3, channels, channels)) / np.sqrt(9 * channels), jnp.float32)
  f = jax.jit(lambda x, k: jax.vjp(lambda a, b: fn(a, b, (1, 1), ((1, 1), (1, 1)),
                                                      dimension_numbers=("NHWC", "HWIO", "NHWC")), x, k)[1](x))
  return roofline.median_seconds(lambda: jax.block_until_ready(f(x, k)), (), 5)


def main(argv):
  del argv
  out = {"batch": _BATCH.value, "jax": jax.__version__}
  calls = {w: cpu_race.chunk_call("resnet18", _BATCH.value, 1, model=dict(winograd=w)) for w in VARIANTS}
  for call in calls.values():
    call()  # compile and warm up
  times = {w: [] for w in VARIANTS}
  for _ in range(_ROUNDS.value):
    for w, call in calls.items():
      t0 = time.perf_counter()
      call()
      times[w].append(time.perf_counter() - t0)
  for w in VARIANTS:
    out[f"step_s_winograd{w}"] = round(statistics.median(times[w]), 4)
    out[f"samples_per_s_winograd{w}"] = round(_BATCH.value / statistics.median(times[w]), 2)
  images = 2 * _BATCH.value
  for side, ch in STAGES:
    direct = conv_seconds(conv_lib.conv_grad_conv, side, ch, images)
    out[f"conv{side}x{ch}_direct_ms"] = round(1e3 * direct, 2)
    for m in (2, 4):
      t = conv_seconds(winograd.winograd_conv(m, conv_lib.conv_grad_conv), side, ch, images)
      out[f"conv{side}x{ch}_f{m}_ms"] = round(1e3 * t, 2)
  if _TORCH.value:
    for variant in ("tensor", "tensor_cl"):
      r = cpu_race.torch_samples_per_s(_TORCH.value, "resnet18", variant, _BATCH.value, _TORCH_STEPS.value)
      out[f"torch_{variant}_samples_per_s"] = round(r["samples_per_s"], 2)
      out["torch"] = r["torch"]
    best = max(out["torch_tensor_samples_per_s"], out["torch_tensor_cl_samples_per_s"])
    for w in VARIANTS:
      out[f"ratio_winograd{w}"] = round(out[f"samples_per_s_winograd{w}"] / best, 3)
  print(json.dumps(out))


if __name__ == "__main__":
  errors.run_app(main, __doc__)
