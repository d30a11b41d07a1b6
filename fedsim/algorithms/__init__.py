"""FL algorithms, one file each, behind the :class:`~fedsim.algorithms.base.Algorithm` protocol.

Each file holds its algorithm and that algorithm's config class. The built-in ones are registered below, in
one list; an algorithm of your own (config class and all, in your own module) is one
:func:`~fedsim.config.register_algorithm` call away and then runs from YAML like these.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from fedsim.algorithms.base import Algorithm
from fedsim.algorithms.decentlam import DecentLaM, DecentLaMConfig
from fedsim.algorithms.ditto import Ditto, DittoConfig
from fedsim.algorithms.dmsgd import Dmsgd, DmsgdConfig
from fedsim.algorithms.dpsgd import Dpsgd, DpsgdConfig
from fedsim.algorithms.fedavg import FedAvg, FedAvgConfig
from fedsim.algorithms.fedlgd import FedLgd, FedLgdConfig
from fedsim.algorithms.fednova import FedNova, FedNovaConfig
from fedsim.algorithms.fedprox import FedProx, FedProxConfig
from fedsim.algorithms.lgd import Lgd, LgdConfig
from fedsim.algorithms.scaffold import Scaffold, ScaffoldConfig
from fedsim.config import AlgorithmBase, ConfigError, register_algorithm
from fedsim.config.algorithm import AlgorithmFactory, algorithm_entry, algorithm_names

BUILTIN: list[tuple[type[AlgorithmBase], AlgorithmFactory]] = [
    (FedAvgConfig, lambda cfg, n: FedAvg(cfg)),
    (FedProxConfig, lambda cfg, n: FedProx(cfg)),
    (FedNovaConfig, lambda cfg, n: FedNova(cfg)),
    (ScaffoldConfig, Scaffold),
    (DittoConfig, lambda cfg, n: Ditto(cfg)),
    (FedLgdConfig, lambda cfg, n: FedLgd(cfg)),  # leaders elected from each cohort (fedsim.sim.rounds.leaders)
    (DpsgdConfig, lambda cfg, n: Dpsgd(cfg)),  # decentralised: over a topology (fedsim.decentralised.gossip)
    (DmsgdConfig, lambda cfg, n: Dmsgd(cfg)),
    (DecentLaMConfig, lambda cfg, n: DecentLaM(cfg)),
    (LgdConfig, lambda cfg, n: Lgd(cfg)),  # leaders instead of a topology
]
for _config, _factory in BUILTIN:
    register_algorithm(_config, _factory)


class _Registry:
    """``REGISTRY``: a read-only view of the names every registered algorithm answers to."""

    def __iter__(self) -> Iterator[str]:
        return iter(algorithm_names())


REGISTRY = _Registry()


def build_algorithm(cfg: AlgorithmBase, num_clients: int) -> Algorithm:
    """The algorithm ``cfg.kind`` names; ``num_clients`` is the population size (SCAFFOLD needs it)."""
    entry = algorithm_entry(cfg.kind)
    if entry is None:
        raise KeyError(f"no algorithm registered as {cfg.kind!r}")
    algorithm: Algorithm = entry.factory(cfg, num_clients)
    return algorithm


def one_update_per_client(what: str, name: str, sums: Mapping[str, int]) -> None:
    """Refuse, in one line naming ``what`` asked for it, an algorithm whose clients send more than one model
    update to average (DP's clip, SecAgg+'s weight factor and a robust rule each bound or combine one)."""
    if set(sums) != {"delta"}:
        raise ConfigError(
            f"{what}: algorithm {name} sums {sorted(sums)}, not one model update per client; use fedavg, fedprox"
            " or ditto (any server_optimizer)"
        )
