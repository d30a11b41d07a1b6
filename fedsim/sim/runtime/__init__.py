"""Where a run executes: the accelerator, the pool of ranks, data placement, the scheduler and its runtime
model, threads and the allocator."""
