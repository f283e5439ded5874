"""Which kernels run the train step's convolutions on XLA:CPU, chosen per network from measurements.

Two choices, each ``auto`` by default and resolved here only:

* ``model.cpu_convs``: JAX 0.10's XLA:CPU hands convolutions, dots, elementwise
  fusions and reductions to YNNPACK (``ynnpack``, its default). ``xla`` compiles the
  train step with ``xla_cpu_experimental_ynn_fusion_type`` (a per-program compiler
  option, not a process-wide flag) set to the YNNPACK fusion types the net keeps
  (``CpuKernels.ynn_keeps``): the convolutions go to XLA's own (Eigen) kernels; the
  compiled HLO shows a ``convolution`` instead of a ``__ynn_fusion``.
* ``model.conv_backward``: ``matmul`` (conv.py's im2col gradients), ``conv``
  (conv.py: stride-1 gradients as forward convolutions, im2col for strided ones; a
  stride-1 convolution of a one-channel image, the R-MNIST net's conv1, is a
  row-Toeplitz matmul, forward and gradient) or ``xla`` (JAX's own transposes).

Measured on this project's 2-core x86 CPU, JAX 0.10.2 (BENCHMARKS.md, "CPU
speed"): the R-MNIST net's 5x5 20->50 conv on 512 images takes 65-82 ms forward
with YNNPACK and 12-15 ms with XLA's kernel, both gradients 231 -> 55-71 ms;
its whole train step runs ~1.6x faster with XLA convolutions than with YNNPACK
convolutions and matmul gradients. Its gradients are ``conv``: JAX's
own (``xla``) were as fast inside a chunk of 8 unrolled steps, but in a program of
one step (or one step in a loop, as every chunk is since) XLA's layout
assignment leaves the weight gradients as non-canonical convolutions
(``dim_labels=f01b_i01o->01bf``) that run on a slow generic loop: 3.8 s instead of
0.18 s per step on full R-MNIST; ``conv`` emits canonical NHWC/HWIO convolutions
in every program (tests/test_cpu_kernels.py). ResNet-18: its
BatchNorm statistics run several times faster as YNNPACK reductions than as XLA
loops, so it keeps YNNPACK's ``REDUCE`` fusions beside the dots; with XLA
convolutions and ``conv`` gradients its whole step (batch 32 with the past model)
went from 2.45 to 1.72 s (min of 5 interleaved calls). XLA's own gradients of its
padded/strided convolutions take minutes, so it never uses ``xla`` gradients. The
R-MNIST net (and its BN variant, configs/mnist5k.py) gained nothing from keeping
``REDUCE`` (within the noise), so it keeps dots only. On GPU/TPU no option applies.
All paths agree to float32 rounding (tests/test_cpu_kernels.py, tests/test_conv.py).

The figures above are from a 2-vCPU Intel Xeon (AVX-512). On a 2-vCPU AMD EPYC (Zen 1, AVX2 only)
the choices were re-checked: ResNet-18's step (batch 32, past model) 5.3 s as chosen, 11.7 s with YNNPACK
convolutions, 6.1 s with ``matmul`` gradients, 5.9 s keeping only YNNPACK's dots; the
R-MNIST net's YNNPACK fusion types within the noise of each other. The choices stand on both.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

CONVS = ("auto", "ynnpack", "xla")
CONV_BACKWARD = ("auto", "matmul", "conv", "xla")
YNN_FUSION_TYPE = "xla_cpu_experimental_ynn_fusion_type"


@dataclasses.dataclass(frozen=True)
class CpuKernels:
  convs: str           # ynnpack | xla: forward convolution kernels
  conv_backward: str   # matmul | conv | xla
  ynn_keeps: tuple = ("INDIVIDUAL_DOT",)  # the YNNPACK fusion types kept when convs == "xla"


# What ``auto`` means on CPU, per model.name (measured, see the module docstring).
CPU_AUTO = {"mnistnet": CpuKernels(convs="xla", conv_backward="conv"),
            "resnet18": CpuKernels(convs="xla", conv_backward="conv", ynn_keeps=("INDIVIDUAL_DOT", "REDUCE"))}
ACCELERATOR = CpuKernels(convs="ynnpack", conv_backward="xla")  # no CPU option is set; XLA's own gradients


def resolve(model_name: str, convs: str = "auto", conv_backward: str = "auto",
            backend: Optional[str] = None) -> CpuKernels:
  """The concrete choice for this net on ``backend`` (default: JAX's default backend)."""
  if backend is None:
    import jax  # noqa: PLC0415  (here: config_lib imports this module without jax)
    backend = jax.default_backend()
  auto = CPU_AUTO.get(model_name, CPU_AUTO["resnet18"]) if backend == "cpu" else ACCELERATOR
  return CpuKernels(convs=auto.convs if convs == "auto" or backend != "cpu" else convs,
                    conv_backward=auto.conv_backward if conv_backward == "auto" else conv_backward,
                    ynn_keeps=auto.ynn_keeps)


def of_model(model_config) -> CpuKernels:
  """:func:`resolve` for a config's ``model`` section (the one place that reads its two keys)."""
  return resolve(model_config.name, model_config.get("cpu_convs", "auto"), model_config.get("conv_backward", "auto"))


def compiler_options(kernels: CpuKernels) -> Optional[dict]:
  """``jax.jit(..., compiler_options=...)`` for the train step (a comma-separated list of fusion types)."""
  if kernels.convs != "xla":
    return None
  return {YNN_FUSION_TYPE: ",".join(f"LIBRARY_FUSION_TYPE_{t}" for t in kernels.ynn_keeps)}


# Process-wide XLA flags per network, for the command line (before JAX's backend starts): XLA:CPU's loop emitters for
# elementwise fusions compile the MLP's programs, read-outs included, faster than its fusion emitters (a cold
# Split-MNIST ER run 9.94 -> 8.44 s of wall, BENCHMARKS.md) with the same results (Split-MNIST ER, 3 Rotated MNIST
# domains: accuracies and loss curves equal); a conv net's arithmetic would move, so they keep the default.
PROCESS_FLAGS = {"mlp": ("--xla_cpu_use_fusion_emitters=false",)}


def set_process_flags(model_name: str) -> None:
  """Adds this network's ``PROCESS_FLAGS`` to $XLA_FLAGS (``add_xla_flags``)."""
  add_xla_flags(*PROCESS_FLAGS.get(model_name, ()))


def add_xla_flags(*flags: str) -> None:
  """Appends ``flags`` to $XLA_FLAGS, but none whose name $XLA_FLAGS already sets (the user's value wins)."""
  current = os.environ.get("XLA_FLAGS", "")
  named = {f.split("=")[0] for f in current.split()}
  extra = [f for f in flags if f.split("=")[0] not in named]
  if extra:
    os.environ["XLA_FLAGS"] = " ".join([current, *extra]).strip()
