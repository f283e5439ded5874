"""Evaluation: the read-outs after a task (evaluators, probe, linear), metrics, health checks, baselines."""
