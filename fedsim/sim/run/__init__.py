"""Every run's lifecycle, written once: the shared context (data, replica, pool, state store, ledger, checkpoint
writer, run store, totals), the loop with its stops, checkpoints and resume, evaluation and the summary; the
synchronous, asynchronous and decentralised engines advance it."""
