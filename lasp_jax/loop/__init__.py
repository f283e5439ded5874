"""The training loop's parts: the run's values (context), epochs, the compiled step, boundaries, seeds, checkpoints."""
