"""Tasks: a loss plus its metrics, used by local training, evaluation and SkewScout's probes."""
