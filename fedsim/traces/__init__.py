"""Population traces for the virtual clock: each client's device speed, links and availability.

``format`` (the file, its checks and the queries the clock asks), ``synthetic`` (a generated population with
its parameters recorded), ``fedscale`` (FedScale's published traces, where a user has them).
"""

from fedsim.traces.fedscale import load_fedscale
from fedsim.traces.format import Trace, load
from fedsim.traces.synthetic import SyntheticPopulation, synthesize

__all__ = ["SyntheticPopulation", "Trace", "load", "load_fedscale", "synthesize"]
