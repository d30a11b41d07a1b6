"""Decentralised training: nodes that keep their own models and gossip over a topology (the gossip engine, its
checkpoints, the topologies). It runs the federated engine's loop (fedsim.sim.rounds.run_loop)."""
