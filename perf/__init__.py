"""Performance tools: the benchmark suite, the CPU race against PyTorch, the roofline, profilers, GPU scripts."""

from lasp_jax import host_memory

# The performance tools are programs, like lasp_jax.main: malloc keeps freed blocks before JAX's backend starts (host_memory.py).
host_memory.keep_freed_memory()
