"""Population traces for the virtual clock: each client's device speed, links and availability.

``format`` (the file, its checks and the queries the clock asks), ``synthetic`` (a generated population with
its parameters recorded), ``fedscale`` (FedScale's published traces, where a user has them).
"""

from fedsim.config import TraceConfig
from fedsim.traces.fedscale import load_fedscale
from fedsim.traces.format import Trace, load
from fedsim.traces.synthetic import SyntheticPopulation, synthesize


def build_trace(cfg: TraceConfig, seed: int) -> Trace:
    """The population ``cfg`` names: a fedsim trace file, FedScale's pickles, or a synthetic one (seeded by
    ``seed`` unless it gives its own)."""
    if cfg.path is not None:
        return load(cfg.path)
    if cfg.fedscale_capacity is not None:
        return load_fedscale(cfg.fedscale_capacity, cfg.fedscale_behaviour)
    params = cfg.synthetic.model_dump()
    params["seed"] = seed if params["seed"] is None else params["seed"]
    return synthesize(SyntheticPopulation(**params))


__all__ = ["SyntheticPopulation", "Trace", "build_trace", "load", "load_fedscale", "synthesize"]
