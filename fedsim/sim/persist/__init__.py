"""What outlives a process: checkpoints and resume, interruption and failure, the run's output directory."""
