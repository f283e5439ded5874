"""The least bytes and the FLOPs of each top-level instruction of a compiled XLA program, from its HLO text.

``costs(compiled.as_text())`` maps the name of every instruction outside fused computations (the ones a profiler
trace names: ``ynn_fusion.16``, ``add_divide_fusion``, ``conv_general_dilated.24``, ...) to its operands' and its
output's bytes (each read or written once: the least an instruction can move) and the FLOPs of the dots and
convolutions it runs (2 per multiply-add; a fusion counts those of its fused computation). Together with a measured
matmul rate and stream bandwidth, that is each instruction's roofline bound (``perf.profile_ops --bounds``).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8}
_ARRAY = re.compile(r"\b(" + "|".join(_BYTES) + r")\[([\d,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) ([\w\-]+)\((.*?)\)(?:, (.*))?$")
_HEADER = re.compile(r"^(?:ENTRY )?%([\w.\-]+) \((.*)\) -> .* \{$")
# Instructions that move no data of their own.
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id"}


@dataclasses.dataclass(frozen=True)
class Cost:
  op: str
  bytes: int
  flops: float
  shape: str

  def bound_ms(self, peak_gflops: float, bw_gbps: float) -> float:
    """Its roofline bound: max(FLOPs / matmul rate, least bytes / stream bandwidth), in milliseconds."""
    return max(self.flops / peak_gflops, self.bytes / bw_gbps) / 1e6


def _nbytes(type_text: str) -> int:
  return sum(_BYTES[t] * int(np.prod([int(d) for d in dims.split(",") if d])) for t, dims in _ARRAY.findall(type_text))


def _dims(type_text: str) -> list[int]:
  m = _ARRAY.search(type_text)
  return [int(d) for d in m.group(2).split(",") if d] if m else []


def _computations(text: str) -> dict[str, list[tuple]]:
  """Computation name -> its (name, type, opcode, operand names, attributes) instructions; parameters typed."""
  comps, current = {}, None
  for line in text.splitlines():
    head = _HEADER.match(line)
    if head:
      current = comps.setdefault(head.group(1), [])
      continue
    if current is None:
      continue
    if line.startswith("}"):
      current = None
      continue
    m = _INSTR.match(line)
    if m:
      name, type_text, opcode, operands, attrs = m.groups()
      current.append((name, type_text, opcode, re.findall(r"%([\w.\-]+)", operands), attrs or ""))
  return comps


def _flops(instr, types: dict[str, str]) -> float:
  name, type_text, opcode, operands, attrs = instr
  out = float(np.prod(_dims(type_text)))
  if opcode == "dot":
    lhs = _dims(types[operands[0]])
    contract = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", attrs).group(1)
    return 2.0 * out * float(np.prod([lhs[int(d)] for d in contract.split(",") if d]))
  if opcode == "convolution":
    kernel = _dims(types[operands[1]])
    labels = re.search(r"dim_labels=\w+_(\w+)->", attrs).group(1)
    # Every kernel dimension but its output features multiplies each output value's work.
    return 2.0 * out * float(np.prod([n for n, label in zip(kernel, labels) if label != "o"]))
  return 0.0


def costs(hlo_text: str) -> dict[str, Cost]:
  """Bytes and FLOPs of every instruction of the program's unfused computations (entry, loop bodies)."""
  comps = _computations(hlo_text)
  fused = {m for instrs in comps.values() for i in instrs
           for m in re.findall(r"calls=%([\w.\-]+)", i[4]) if i[2] in ("fusion", "custom-call")}
  fused |= {m for instrs in comps.values() for i in instrs for m in re.findall(r"to_apply=%([\w.\-]+)", i[4])}
  types_of = {c: {i[0]: i[1] for i in instrs} for c, instrs in comps.items()}
  out = {}
  for comp, instrs in comps.items():
    if comp in fused:
      continue
    types = types_of[comp]
    for instr in instrs:
      name, type_text, opcode, operands, attrs = instr
      if opcode in _FREE or opcode in ("while", "conditional", "call"):
        continue
      nbytes = _nbytes(type_text) + sum(_nbytes(types.get(o, "")) for o in operands)
      flops = _flops(instr, types)
      for callee in re.findall(r"calls=%([\w.\-]+)", attrs):
        inner = types_of.get(callee, {})
        flops += sum(_flops(i, inner) for i in comps.get(callee, []))
      out[name] = Cost(opcode, nbytes, flops, type_text.split("{")[0])
  return out
