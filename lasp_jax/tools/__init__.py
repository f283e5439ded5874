"""Command-line tools: ``python -m lasp_jax.tools.prepare`` (datasets), ``python -m lasp_jax.tools.inspect``."""
