"""Every figure the documentation quotes is recomputed from a file the repository ships.

    python -m experiments.check_claims            # exit 1 and one line per unbacked figure, else a summary

The *claims* are the decimal numbers in the README and FINDINGS.md (all of them), in the tables of BENCHMARKS.md
and of every results/**/README.md, and in the results blocks of the configs' docstrings. The *files* are what the
experiments wrote: every JSON under results/ (benchmarks included; each number, and its roundings to
2, 1 and 0 decimals), the generated tables and logs under results/ (the same), and the paper's numbers
(experiments/aggregate.py). A claim is backed when its absolute value, as written, is among them; a figure
that no file holds must be listed in TEXT_ONLY with the reason. A ``<!-- from: FILE#HEADING -->`` line binds the
figures after it to that file or section alone (``MARKER``). A generated table is itself checked against its
runs by the experiment that writes it (``--aggregate_only`` rewrites it; tests/test_claims.py compares).
"""

from __future__ import annotations

import ast
import decimal
import json
import math
import pathlib
import re
import sys
from typing import Iterable, Iterator

REPO = pathlib.Path(__file__).resolve().parents[1]
# "mean (std)": a pair must appear as one in a generated table (two numbers found apart do not make it).
PAIR = re.compile(r"([−\-+]?\d[\d,]*\.\d+) \((\d[\d,]*\.\d+)\)")
DECIMAL = re.compile(r"(?<![\w.\-])[−\-+]?(?:\d{1,3}(?:,\d{3})+|\d+)\.\d+(?![\d.]*\d)")

# Figures a document states without a file behind them, and why (document -> {figure: reason}). A ratio or
# difference of two shipped figures is text only: its parts are checked.
TEXT_ONLY: dict[str, dict[str, str]] = {
    "BENCHMARKS.md": {"1.18": "16,540 / 14,030 (h200_2026-11-27/core.json, torch.json)",
                      "1.57": "33,375 / 21,242 (h200_2026-11-27/core.json, torch.json)"},
    "results/lasp_gain/README.md": {"+13.3": "94.43 - 81.14, results/rmnist_paper's SD and Co2L"},
}


def _walk_json(obj) -> Iterator[float]:
  if isinstance(obj, bool):
    return
  if isinstance(obj, (int, float)):
    if math.isfinite(obj):
      yield float(obj)
  elif isinstance(obj, dict):
    for v in obj.values():
      yield from _walk_json(v)
  elif isinstance(obj, list):
    for v in obj:
      yield from _walk_json(v)


def _rounded(v: float, k: int) -> set[str]:
  """v to k decimals, as Python formats it (half to even on the binary value) and as a person rounds (half up)."""
  half_up = decimal.Decimal(repr(v)).quantize(decimal.Decimal(1).scaleb(-k), rounding=decimal.ROUND_HALF_UP)
  return {f"{v:.{k}f}", f"{half_up:.{k}f}"}


def _forms(value: float) -> set[str]:
  """The ways a number is written in a document: as stored, and rounded to 2, 1 and 0 decimals."""
  v = abs(value)
  stored = repr(v).rstrip("0").rstrip(".") if "e" not in repr(v) else repr(v)
  return {stored, *_rounded(v, 2), *_rounded(v, 1), *_rounded(v, 0)}


def _text_numbers(text: str) -> Iterator[float]:
  for m in DECIMAL.finditer(text):
    yield float(_normal(m.group()))
  for m in re.finditer(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?![\d.])|(?<![\w.])\d+(?![\w.])", text):
    yield float(m.group().replace(",", ""))


def _normal(token: str) -> str:
  return token.replace("−", "-").replace(",", "").lstrip("+")


# What a run's results.json holds as figures (its per-epoch curves are thousands of numbers: any decimal would
# match one of them by chance, so a figure from a curve belongs in a generated table first).
# Of the accuracy matrices only A[T][T] (the last-angle figure) is one: a table quotes a row's summary, not its
# cells.
RESULT_KEYS = ("final", "avg_accuracy", "forgetting", "bwt", "baselines", "timing", "wall_time_s", "extra",
               "boundary_detection")


def _pair_forms(text: str) -> set[str]:
  forms = set()
  for m in PAIR.finditer(text):
    a, b = (abs(float(_normal(g))) for g in m.groups())
    forms |= {f"{x} ({y})" for k in (2, 1) for x in _rounded(a, k) for y in _rounded(b, k)}
  return forms


def _pair_key(a: str, b: str) -> str:
  return f"{_normal(a).lstrip('-')} ({_normal(b)})"


def _file_forms(path: pathlib.Path) -> set[str]:
  if path.suffix != ".json":
    text = path.read_text(errors="replace")
    return {*(f for v in _text_numbers(text) for f in _forms(v)), *_pair_forms(text)}
  if path.suffix == ".json":
    obj = json.loads(path.read_text())
    if path.name == "results.json" and isinstance(obj, dict):
      last = {n: m[-1][-1] for n, m in obj.get("acc_matrix", {}).items()}
      obj = {**{k: v for k, v in obj.items() if k in RESULT_KEYS}, "last": last}
      obj.get("boundary_detection", {}).pop("observations", None) if isinstance(obj.get("boundary_detection"),
                                                                               dict) else None
  values = _walk_json(obj)
  forms: set[str] = set()
  for v in values:
    forms |= _forms(v)
  return forms


SOURCE_SUFFIXES = (".json", ".md", ".csv", ".txt", ".log")


def sources(scope: pathlib.Path, root: pathlib.Path = REPO) -> list[pathlib.Path]:
  """The shipped files a document in ``scope`` may quote (README.md files are claims, not sources)."""
  return [p for p in scope.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.name != "README.md" and p.is_file()]


def backing(scope: pathlib.Path, root: pathlib.Path = REPO, cache: dict | None = None) -> set[str]:
  """Every form of every figure in the files under ``scope``, and the paper's numbers."""
  cache = {} if cache is None else cache
  forms: set[str] = set()
  for path in sources(scope, root):
    if path not in cache:
      cache[path] = _file_forms(path)
    forms |= cache[path]
  from experiments import aggregate  # noqa: PLC0415  (the paper's tables; experiments.aggregate imports the library)
  for table in (aggregate.PAPER_TABLE1, aggregate.PAPER_TABLE2, aggregate.PAPER_TABLE3):
    for v in _paper_values(table):
      forms |= _forms(v)
    forms |= {_pair_key(f"{m:.2f}", f"{sd:.2f}") for m, sd in _paper_pairs(table)}
  return forms


def _paper_pairs(table) -> Iterator[tuple[float, float]]:
  if isinstance(table, dict):
    for v in table.values():
      yield from _paper_pairs(v)
  elif isinstance(table, list):
    for v in table:
      yield from _paper_pairs(v)
  elif isinstance(table, tuple):
    yield table


def _paper_values(table) -> Iterator[float]:
  if isinstance(table, dict):
    for v in table.values():
      yield from _paper_values(v)
  elif isinstance(table, (list, tuple)):
    for v in table:
      yield from _paper_values(v)
  elif isinstance(table, (int, float)):
    yield float(table)


def _md_table_lines(text: str) -> Iterator[tuple[int, str]]:
  for i, line in enumerate(text.splitlines(), 1):
    if line.lstrip().startswith("|"):
      yield i, line


def _all_lines(text: str) -> Iterator[tuple[int, str]]:
  yield from enumerate(text.splitlines(), 1)


def _docstring_lines(path: pathlib.Path) -> Iterator[tuple[int, str]]:
  doc = ast.get_docstring(ast.parse(path.read_text())) or ""
  yield from enumerate(doc.splitlines(), 1)


def documents(root: pathlib.Path = REPO) -> list[tuple[pathlib.Path, Iterable[tuple[int, str]]]]:
  """(document, its numbered lines that make claims)."""
  docs = [(root / name, _all_lines((root / name).read_text())) for name in ("README.md", "FINDINGS.md")
          if (root / name).exists()]
  for path in [root / "BENCHMARKS.md", *sorted((root / "results").rglob("README.md"))]:
    if path.exists():
      docs.append((path, _md_table_lines(path.read_text())))
  for path in sorted((root / "configs").glob("*.py")):
    docs.append((path, _docstring_lines(path)))
  return docs


# Tokens that are not figures: versions, dates, commits, hyperparameters written in prose.
_SKIP_LINE = re.compile(r"^\s*(pip|python|lasp-jax|jax==|#|```)")


def claims(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str, str]]:
  """(line, figure as written, its key) for every "mean (std)" pair and every other decimal number on the lines
  (versions like 0.10.2 are not figures)."""
  for i, line in lines:
    if _SKIP_LINE.match(line):
      continue
    for m in PAIR.finditer(line):
      yield i, m.group(), _pair_key(*m.groups())
    for m in DECIMAL.finditer(PAIR.sub(" ", line)):
      yield i, m.group(), _normal(m.group()).lstrip("-")


def scope_of(doc: pathlib.Path, root: pathlib.Path = REPO) -> pathlib.Path:
  """The files a document may quote: its own folder's under results/, every result for the top-level docs."""
  return doc.parent if doc.parent != root and (root / "results") in doc.parents else root / "results"


# A line ``<!-- from: PATH[#HEADING] ... -->`` ties the figures of the lines after it (to the next such line) to
# those files, or to the part of a markdown file under the heading that starts with HEADING (to the next heading
# of its level or higher): a figure that exists elsewhere but not in its cell fails. ``<!-- from: * -->`` ends it.
MARKER = re.compile(r"<!--\s*from:\s*(.*?)\s*-->")


def _section(text: str, heading: str) -> str:
  lines, out, level = text.splitlines(), [], None
  for line in lines:
    m = re.match(r"^(#+)\s+(.*)", line)
    if m and level is not None and len(m.group(1)) <= level:
      break
    if m and level is None and m.group(2).startswith(heading):
      level = len(m.group(1))
    if level is not None:
      out.append(line)
  if level is None:
    raise ValueError(f"no heading starting with {heading!r}")
  return "\n".join(out)


def marked_forms(spec: str, root: pathlib.Path, cache: dict) -> set[str] | str:
  """The forms of the figures the marker's files (or sections) hold, or a problem naming a missing one."""
  forms: set[str] = set()
  for item in spec.split():
    path, _, heading = item.partition("#")
    file = root / path
    if not file.is_file():
      return f"{path} does not exist"
    if not heading:
      if file not in cache:
        cache[file] = _file_forms(file)
      forms |= cache[file]
      continue
    try:
      text = _section(file.read_text(), heading.replace("_", " "))
    except ValueError as e:
      return f"{path}: {e}"
    forms |= {*(f for v in _text_numbers(text) for f in _forms(v)), *_pair_forms(text)}
  return forms


def _markers(path: pathlib.Path) -> dict[int, str]:
  """Line number -> the marker in force on it (lines before any marker: none)."""
  out, spec = {}, None
  for i, line in enumerate(path.read_text().splitlines(), 1):
    m = MARKER.search(line)
    if m:
      spec = None if m.group(1) == "*" else m.group(1)
    elif spec:
      out[i] = spec
  return out


def check(root: pathlib.Path = REPO) -> list[str]:
  """One line per figure that no shipped file holds (or not the file its marker names) and TEXT_ONLY does not
  list."""
  cache: dict = {}
  problems = []
  for path, lines in documents(root):
    forms = backing(scope_of(path, root), root, cache)
    rel = str(path.relative_to(root))
    allowed = TEXT_ONLY.get(rel, {})
    marked, specs = _markers(path), {}
    for i, token, key in claims(lines):
      if token in allowed or key in allowed:
        continue
      if i in marked:
        spec = marked[i]
        if spec not in specs:
          specs[spec] = marked_forms(spec, root, cache)
        if isinstance(specs[spec], str):
          problems.append(f"{rel}:{i}: its marker: {specs[spec]}")
        elif key not in specs[spec]:
          problems.append(f"{rel}:{i}: {token} is not in {spec}")
      elif key not in forms:
        problems.append(f"{rel}:{i}: {token} is in no shipped file")
  return problems


def main() -> int:
  problems = check()
  for p in problems:
    print(p)
  n = sum(1 for _, lines in documents() for _ in claims(lines))
  print(f"{n} figures checked, {len(problems)} not backed by a shipped file", file=sys.stderr)
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
