"""The algorithm section of a run and the one registry of algorithms.

Every algorithm's config subclasses :class:`AlgorithmConfig` (local training: SGD on the client's split) with
``kind: Literal["..."]`` and its own fields, next to the algorithm in ``fedsim/algorithms/``, and is registered
with :func:`register_algorithm` together with the factory that builds the algorithm. The run config resolves
``algorithm.kind`` here, so adding an algorithm touches no other file. The built-in algorithms register when
their package, ``fedsim.algorithms``, is first imported; a name not yet known loads that package once (by its
import path, as a plugin would be) before it is reported unknown. Your own algorithm, registered in your own
module, is named from YAML by ``factory: package.module:Name`` (or ``path/to/file.py:Name``: its config class or
builder), as attacks and rules are.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from fedsim.config.base import Strict, SubConfigError
from fedsim.config.client_optimizer import ClientOptimizerConfig, SgdClientOptimizer
from fedsim.config.imports import registered_as
from fedsim.config.task import LrSchedule

BUILTIN = "fedsim.algorithms"


class AlgorithmBase(Strict):
    """What every algorithm's section has: its ``kind`` (or your ``factory``), the step size ``lr`` scaled by
    round by ``lr_schedule``, and the batch. A federated algorithm's local training adds to it
    (:class:`AlgorithmConfig`); a gossiping node's takes one gradient a round
    (:class:`fedsim.algorithms.gossip.GossipConfig`)."""

    lr: float = Field(
        0.05, gt=0, description="the clients' (or nodes') step size, times lr_schedule's factor each round"
    )
    batch_size: int = Field(16, ge=1, description="samples per local step")
    lr_schedule: LrSchedule = Field(
        LrSchedule(), description="how lr changes from round to round (constant: not at all)"
    )
    kind: str
    factory: str | None = Field(
        None, description="your own algorithm: package.module:Name, its config class or builder, registered on import"
    )
    decentralised: ClassVar[bool] = False  # a gossip algorithm (fedsim.algorithms.gossip): no server
    over_topology: ClassVar[bool] = False  # a gossip algorithm that mixes over the run's topology
    elects_leaders: ClassVar[bool] = False  # the server adopts elected clients' models (fedlgd)
    adds_mean: ClassVar[bool] = False  # the server adds (server_lr times) the clients' mean delta, as FedAvg's
    sends_local_model: ClassVar[bool] = False  # global + the delta is the client's local model (FedAsync mixes it)

    def client_lr(self, round_idx: int) -> float:
        """The clients' (or nodes') learning rate in round ``round_idx``: ``lr`` times the schedule's factor."""
        return self.lr * self.lr_schedule.factor(round_idx)


class AlgorithmConfig(AlgorithmBase):
    """A federated algorithm's local training: the client's optimiser (``client_optimizer``, each kind with its
    own settings: :mod:`fedsim.config.client_optimizer`) on its split, ``local_epochs`` over it or
    ``local_steps`` steps; each client weighs its samples or 1 (``weighting``)."""

    local_epochs: int = Field(
        1, ge=1, description="passes over the client's split per round (local_steps, where set, counts steps instead)"
    )
    local_steps: int | None = Field(None, ge=1, description="if set, a fixed number of SGD steps instead")
    client_optimizer: ClientOptimizerConfig = Field(
        SgdClientOptimizer(), description="the optimiser a client steps with, and its settings"
    )
    weighting: Literal["samples", "uniform"] = Field(
        "samples", description="samples: a client's update weighs its sample count; uniform: every client alike"
    )

    @property
    def keeps_optimizer_state(self) -> bool:
        """Whether clients carry optimiser state between rounds (there is state to carry)."""
        return self.client_optimizer.keeps_state

    def client_weight(self, n_samples: int) -> float:
        """A client's aggregation weight: its training samples, or 1 each under ``weighting: uniform``."""
        return 1.0 if self.weighting == "uniform" else float(n_samples)


AlgorithmFactory = Callable[[Any, int], Any]  # (its config, population size) -> an Algorithm


@dataclass(frozen=True)
class AlgorithmEntry:
    name: str
    config: type[AlgorithmBase]
    factory: AlgorithmFactory


_ALGORITHMS: dict[str, AlgorithmEntry] = {}


def _names(config: type[AlgorithmBase]) -> tuple[str, ...]:
    field = config.model_fields["kind"]
    names = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is Literal else ()
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{config.__name__}.kind must be a Literal of the algorithm's name(s)")
    return tuple(names)


def register_algorithm(config: type[AlgorithmBase], factory: AlgorithmFactory) -> None:
    """Register the algorithm(s) ``config.kind`` names: ``factory(config, num_clients)`` builds one."""
    names = _names(config)
    taken = [n for n in names if n in _ALGORITHMS]
    if taken:
        raise ValueError(f"algorithm {taken[0]!r} is already registered")
    for name in names:
        _ALGORITHMS[name] = AlgorithmEntry(name, config, factory)


def unregister_algorithm(name: str) -> None:
    """Forget ``name`` (tests that register an algorithm of their own clean up with this)."""
    _ALGORITHMS.pop(name, None)


def algorithm_entry(name: str) -> AlgorithmEntry | None:
    if name not in _ALGORITHMS:
        importlib.import_module(BUILTIN)  # registers the built-in algorithms, once
    return _ALGORITHMS.get(name)


def algorithm_names() -> list[str]:
    importlib.import_module(BUILTIN)
    return list(_ALGORITHMS)


def parse_algorithm(value: Any) -> AlgorithmBase:
    """The registered config class named by ``value["kind"]``, validated; a ValueError says what is wrong."""
    if isinstance(value, AlgorithmBase):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping with a 'kind' (one of {', '.join(algorithm_names())})")
    if value.get("factory") is not None:  # your own, named by where it lives: its module registers it
        value = {**value, "kind": _registered_by(str(value["factory"]), value.get("kind"))}
    name = value.get("kind")
    entry = algorithm_entry(name) if isinstance(name, str) else None
    if entry is None:  # worded as pydantic words an unknown tag of the other sections' unions
        tags = ", ".join(repr(n) for n in algorithm_names())
        raise ValueError(
            f"Input tag {repr(name)[:64]} found using 'kind' does not match any of the expected tags: {tags}"
        )
    try:
        return entry.config.model_validate(value)
    except ValidationError as exc:
        raise SubConfigError(exc, entry.config) from None


def _registered_by(path: str, name: Any) -> str:
    """The name of the algorithm whose config class or builder is at ``path`` (importing it registers it)."""
    remedy = "a registered algorithm (call register_algorithm(YourConfig, build) in its module)"

    def entries() -> list[tuple[str, tuple[object, ...]]]:
        return [(e.name, (e.factory, e.config)) for e in _ALGORITHMS.values()]

    return registered_as(path, "algorithm.factory", entries, name, "algorithm.kind", remedy)


def default_algorithm() -> AlgorithmBase:
    return parse_algorithm({"kind": "fedavg"})


def local_training(algorithm: AlgorithmBase) -> AlgorithmConfig:
    """``algorithm`` as a federated algorithm's settings, local training included; a decentralised one (its
    nodes take one gradient a round) has none, which is a TypeError: the federated engines refuse it first."""
    if not isinstance(algorithm, AlgorithmConfig):
        raise TypeError(f"algorithm.kind={algorithm.kind} has no local training (a gossiping node's is one gradient)")
    return algorithm


def decentralised_kind(kind: object) -> bool:
    """Whether ``kind`` names a registered decentralised algorithm (its nodes gossip; no server)."""
    entry = algorithm_entry(kind) if isinstance(kind, str) else None
    return entry is not None and entry.config.decentralised
