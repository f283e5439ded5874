"""Every figure the documentation quotes is in a file the repository ships; generated tables regenerate."""

import json
import pathlib

from experiments import check_claims, equal_heads, lasp_gain, reference, studies, task_free, threats

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_every_documented_figure_is_in_a_shipped_file():
  assert check_claims.check() == []


def _tree(tmp_path, readme: str, table: str, results_readme: str = ""):
  (tmp_path / "results" / "x").mkdir(parents=True)
  (tmp_path / "README.md").write_text(readme)
  (tmp_path / "results" / "x" / "table.md").write_text(table)
  (tmp_path / "results" / "x" / "README.md").write_text(results_readme)
  return tmp_path


def test_a_figure_no_file_holds_is_reported_and_a_rounded_one_is_not(tmp_path):
  table = "| SD | 71.25 (3.10) | 88.125 |\n| pair | 60.00 (2.00) | 12.00 |\n"
  root = _tree(tmp_path, "SD reaches 88.1 and 88.13; Co2L 65.43 (1.00); apart: 60.00 (12.00); 71.3 (3.1).\n", table,
               "| a | b |\n|---|---|\n| SD | 71.25 (3.10) |\n")
  problems = check_claims.check(root)
  assert problems == ["README.md:1: 65.43 (1.00) is in no shipped file",
                      "README.md:1: 60.00 (12.00) is in no shipped file"]  # two numbers of the file, not a pair
  (root / "results" / "x" / "README.md").write_text("| SD | 71.26 (3.10) |\n")
  assert check_claims.check(root)[-1] == "results/x/README.md:1: 71.26 (3.10) is in no shipped file"
  (root / "results" / "x" / "README.md").write_text("prose outside a table is not a claim here: 99.99\n")
  assert len(check_claims.check(root)) == 2


def test_a_results_json_backs_its_summary_figures_not_its_curves(tmp_path):
  root = _tree(tmp_path, "final 81.57, last angle 93.25, a curve value 7.77\n", "")
  run = {"final": {"domain_il": 81.5678}, "acc_matrix": {"domain_il": [[None, None], [70.0, 93.25]]},
         "curves": [{"loss": 7.77}]}
  (root / "results" / "x" / "results.json").write_text(json.dumps(run))
  assert check_claims.check(root) == ["README.md:1: 7.77 is in no shipped file"]


def test_the_generated_tables_regenerate_from_their_runs():
  gain = REPO / "results" / "lasp_gain"
  assert lasp_gain.table(lasp_gain.finished(gain, studies.GAIN_POINTS, 3), studies.GAIN_POINTS) == \
      (gain / "table.md").read_text()
  ref = REPO / "results" / "reference"
  assert reference.table_md(json.loads((ref / "runs.json").read_text()), same_machine=False) == \
      (ref / "table.md").read_text()
  tf = REPO / "results" / "task_free"
  lines, _ = task_free.collect(tf, ["mnist5k", "mnist5k_rot", "rmnist_cpu_p1"], 3, "sd", train=False)
  assert "\n".join(lines) == (tf / "table.md").read_text()
  eh = REPO / "results" / "equal_heads"
  assert equal_heads.table(equal_heads.finished(eh)) == (eh / "table.md").read_text()
  th = REPO / "results" / "threats"
  assert threats.table(*threats.collect(th)) == (th / "table.md").read_text()


def test_a_marked_figure_must_be_in_its_own_cell_not_merely_somewhere(tmp_path):
  table = "# T\n\n## d600\n\n| SD − Co2L | -5.82 (1.25) |\n\n## d2500\n\n| SD − Co2L | -4.26 (1.16) |\n"
  doc = ("<!-- from: results/x/table.md#d600 -->\nAt 600 digits SD − Co2L is -5.82 (1.25).\n"
         "<!-- from: results/x/table.md#d2500 -->\nAt 2,500 digits it is -5.82 (1.25).\n<!-- from: * -->\n"
         "Unmarked: -4.26 (1.16).\n<!-- from: results/x/missing.md -->\n1.50\n")
  root = _tree(tmp_path, doc, table)
  assert check_claims.check(root) == [
      "README.md:4: -5.82 (1.25) is not in results/x/table.md#d2500",  # in the file, but in another point's cell
      "README.md:8: its marker: results/x/missing.md does not exist"]
  (root / "README.md").write_text("<!-- from: results/x/table.md#d7 -->\n1.25\n")
  assert check_claims.check(root) == ["README.md:2: its marker: results/x/table.md: no heading starting with 'd7'"]
