"""Performance tools: the benchmark suite, the CPU race against PyTorch, the roofline, profilers, GPU scripts."""

from lasp_jax.platform import host_memory

# Programs, like lasp_jax.main: malloc keeps freed blocks, set before JAX's backend starts (host_memory.py).
host_memory.keep_freed_memory()
