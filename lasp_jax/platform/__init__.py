"""XLA and host plumbing: CPU kernels, the compilation cache, host memory, clocks, numerics, atomic files."""
