"""What outlives a process: checkpoints and resume, interruption, the run's output directory."""
