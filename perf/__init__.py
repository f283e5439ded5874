"""Performance tools: the benchmark suite, the CPU race against PyTorch, the roofline, profilers, GPU scripts."""
