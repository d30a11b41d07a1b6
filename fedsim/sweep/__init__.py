"""Many runs on one pool of devices: Gavel's heterogeneity-aware policies decide how each run shares the
pool's device types (:mod:`fedsim.sweep.gavel`). cvxpy loads only with this package."""
