"""Aggregation and tables: mean (std) over seeds, the paper's numbers beside each cell."""

from __future__ import annotations

from lasp_jax.eval.metrics import cell, effect_cell, interval_cell, mean_std, p_cell, seeds_cell  # noqa: F401  (the one mean (std) and interval of every table)

# Table 1 of the paper: (memory, method) -> {column: (mean, std)}.
PAPER_TABLE1 = {
    (200, "co2l"): {"cifar10/class_il": (65.57, 1.37), "cifar10/task_il": (93.43, 0.78),
                    "tiny/class_il": (13.88, 0.40), "tiny/task_il": (42.37, 0.74), "rmnist/domain_il": (97.90, 1.92)},
    (200, "sd"): {"cifar10/class_il": (73.72, 0.52), "cifar10/task_il": (96.10, 0.09),
                  "tiny/class_il": (16.02, 0.39), "tiny/task_il": (44.07, 0.66), "rmnist/domain_il": (98.80, 0.26)},
    (200, "gm"): {"cifar10/class_il": (71.30, 1.15), "cifar10/task_il": (95.84, 0.25),
                  "tiny/class_il": (12.46, 0.43), "tiny/task_il": (38.33, 0.90), "rmnist/domain_il": (97.29, 0.59)},
    (200, "sd_gm"): {"cifar10/class_il": (70.64, 0.98), "cifar10/task_il": (95.28, 0.46),
                     "tiny/class_il": (12.93, 0.55), "tiny/task_il": (38.47, 0.68), "rmnist/domain_il": (96.68, 0.55)},
    (500, "co2l"): {"cifar10/class_il": (74.26, 0.77), "cifar10/task_il": (95.90, 0.26),
                    "tiny/class_il": (20.12, 0.42), "tiny/task_il": (53.04, 0.69), "rmnist/domain_il": (98.65, 0.31)},
    (500, "sd"): {"cifar10/class_il": (76.49, 0.63), "cifar10/task_il": (96.39, 0.20),
                  "tiny/class_il": (21.49, 0.50), "tiny/task_il": (52.69, 0.45), "rmnist/domain_il": (98.43, 0.38)},
    (500, "gm"): {"cifar10/class_il": (74.63, 0.95), "cifar10/task_il": (96.15, 0.14),
                  "tiny/class_il": (17.54, 0.44), "tiny/task_il": (48.21, 0.54), "rmnist/domain_il": (97.17, 0.50)},
    (500, "sd_gm"): {"cifar10/class_il": (73.82, 0.42), "cifar10/task_il": (95.67, 0.14),
                     "tiny/class_il": (19.01, 0.31), "tiny/task_il": (48.06, 0.71), "rmnist/domain_il": (96.49, 1.15)},
}
# Table 2 (SD, memory 500): srs_data -> column -> (mean, std).
PAPER_TABLE2 = {
    "onlypast": {"cifar10/class_il": (75.33, 0.53), "cifar10/task_il": (96.28, 0.15),
                 "tiny/class_il": (21.42, 0.25), "tiny/task_il": (52.64, 0.55)},
    "combined": {"cifar10/class_il": (75.20, 0.88), "cifar10/task_il": (96.29, 0.17),
                 "tiny/class_il": (22.07, 0.37), "tiny/task_il": (52.78, 0.35)},
    "onlycurrent": {"cifar10/class_il": (76.49, 0.63), "cifar10/task_il": (96.39, 0.20),
                    "tiny/class_il": (21.49, 0.50), "tiny/task_il": (52.69, 0.45)},
}
# Appendix Table 3 (Split-CIFAR10): row -> per boundary task 1..4.
PAPER_TABLE3 = {
    "past_mean": [(99.18, 0.06), (74.19, 0.34), (63.09, 4.35), (54.08, 0.97)],
    "future_mean": [(30.50, 0.53), (38.65, 0.62), (60.56, 0.40), (76.81, 0.69)],
    "past_std": [(0.23, 0.01), (3.75, 0.10), (2.70, 0.40), (2.92, 0.09)],
    "future_std": [(2.10, 0.03), (2.54, 0.08), (3.82, 0.42), (4.99, 0.45)],
}


def markdown_table(header, rows) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
  return "\n".join(lines)


def csv_table(header, rows) -> str:
  esc = lambda c: f'"{c}"' if "," in str(c) else str(c)
  return "\n".join(",".join(esc(c) for c in r) for r in [header, *rows]) + "\n"
