"""experiments/mechanisms.py's tables from hand-made measurements (the measurements need real runs)."""

from experiments import mechanisms

M = {"offset": 1.2, "spread": 0.6, "offset_over_spread": 2.0, "supcon": 7.0, "supcon_const": 7.3, "ird": 6.3,
     "ird_uniform": 6.93, "grad_supcon": 7.28, "grad_weighted_ird": 20.1, "selected_dims": 206, "z_var": 0.26}


def test_a_diverged_first_later_task_is_a_row_that_says_where():
  data = {"point": "d600", "seed": 0, "first_later_task": [
      {"head": "published", "method": "SD onlycurrent", "start": M, "end": dict(M, offset_over_spread=75.3),
       "task1_flags": ["ird_uniform"], "diverged": None},
      {"head": "published", "method": "Co2L lambda5", "start": M, "end": None, "task1_flags": [],
       "diverged": "non-finite loss at task 1, epoch 3"}]}
  rows = [line for line in mechanisms.tables(data).splitlines() if line.startswith("| published")]
  assert len(rows) == 4
  assert "| 75.30 |" in rows[1] and rows[1].endswith("| ird_uniform |")
  assert rows[3].startswith("| published | Co2L lambda5 | task 1 end | non-finite loss at task 1, epoch 3 |")
  assert rows[3].count("|") == rows[0].count("|")  # as many columns as a measured row
