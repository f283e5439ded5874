"""The paper's experiments: tables, figures, the budget study, the side-by-side with the published code."""

from lasp_jax.platform import host_memory

# Programs, like lasp_jax.main: malloc keeps freed blocks, set before JAX's backend starts (host_memory.py).
host_memory.keep_freed_memory()
