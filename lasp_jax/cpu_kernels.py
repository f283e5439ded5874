"""Which kernels run the train step's convolutions on XLA:CPU, chosen per network from measurements.

Two choices, each ``auto`` by default and resolved here only:

* ``model.cpu_convs``: JAX 0.10's XLA:CPU hands convolutions to YNNPACK
  (``ynnpack``, its default). ``xla`` compiles the train step with
  ``xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`` (a
  per-program compiler option, not a process-wide flag): YNNPACK keeps the dots,
  the convolutions go to XLA's own (Eigen) kernels; the compiled HLO shows a
  ``convolution`` instead of a ``__ynn_fusion``.
* ``model.conv_backward``: ``matmul`` (conv.py's im2col gradients) or ``xla``.

Measured on this project's 2-core x86 CPU, JAX 0.10.2 (BENCHMARKS.md, "CPU
speed"): the R-MNIST net's 5x5 20->50 conv on 512 images takes 65-82 ms forward
with YNNPACK and 12-15 ms with XLA's kernel, both gradients 231 -> 55-71 ms;
its whole train step runs ~1.6x faster with XLA convolutions and XLA gradients
than with the old default (YNNPACK convolutions, matmul gradients). ResNet-18's
step is ~15 % slower with XLA convolutions, and XLA's gradients of its strided
convolutions take minutes, so it keeps YNNPACK and matmul gradients. On GPU/TPU
neither option applies. Both paths agree to float32 rounding
(tests/test_cpu_kernels.py).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax

CONVS = ("auto", "ynnpack", "xla")
CONV_BACKWARD = ("auto", "matmul", "xla")
XLA_CONV_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}


@dataclasses.dataclass(frozen=True)
class CpuKernels:
  convs: str           # ynnpack | xla: forward convolution kernels
  conv_backward: str   # matmul | xla


# What ``auto`` means on CPU, per model.name (measured, see the module docstring).
CPU_AUTO = {"mnistnet": CpuKernels(convs="xla", conv_backward="xla"),
            "resnet18": CpuKernels(convs="ynnpack", conv_backward="matmul")}
ACCELERATOR = CpuKernels(convs="ynnpack", conv_backward="xla")  # no CPU option is set; XLA's own gradients


def resolve(model_name: str, convs: str = "auto", conv_backward: str = "auto",
            backend: Optional[str] = None) -> CpuKernels:
  """The concrete choice for this net on ``backend`` (default: JAX's default backend)."""
  backend = backend or jax.default_backend()
  auto = CPU_AUTO.get(model_name, CPU_AUTO["resnet18"]) if backend == "cpu" else ACCELERATOR
  return CpuKernels(convs=auto.convs if convs == "auto" or backend != "cpu" else convs,
                    conv_backward=auto.conv_backward if conv_backward == "auto" else conv_backward)


def of_model(model_config) -> CpuKernels:
  """:func:`resolve` for a config's ``model`` section (the one place that reads its two keys)."""
  return resolve(model_config.name, model_config.get("cpu_convs", "auto"), model_config.get("conv_backward", "auto"))


def compiler_options(kernels: CpuKernels) -> Optional[dict]:
  """``jax.jit(..., compiler_options=...)`` for the train step."""
  return dict(XLA_CONV_OPTIONS) if kernels.convs == "xla" else None
