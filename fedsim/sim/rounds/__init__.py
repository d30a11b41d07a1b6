"""The federated round: the engine's loop (run_loop, engine), its plan of stages, what clients upload and sum,
the cohort, the round's records and summary."""
