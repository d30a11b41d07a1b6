"""Decentralised training: nodes that keep their own models and gossip over a topology (the gossip engine and the
topologies). Its lifecycle is every run's (fedsim.sim.run)."""
