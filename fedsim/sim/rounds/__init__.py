"""The federated round: the engine, its plan of stages, what clients upload and sum, the cohort, the round's
records and summary. The lifecycle around the rounds is every run's (fedsim.sim.run)."""
