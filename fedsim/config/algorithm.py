"""The algorithm section of a run and the one registry of algorithms.

Every algorithm's config subclasses :class:`AlgorithmConfig` (local training: SGD on the client's split) with
``name: Literal["..."]`` and its own fields, next to the algorithm in ``fedsim/algorithms/``, and is registered
with :func:`register_algorithm` together with the factory that builds the algorithm. The run config resolves
``algorithm.name`` here, so adding an algorithm touches no other file. The built-in algorithms register when
their package, ``fedsim.algorithms``, is first imported; a name not yet known loads that package once (by its
import path, as a plugin would be) before it is reported unknown.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from fedsim.config.base import Strict, SubConfigError

BUILTIN = "fedsim.algorithms"


class AlgorithmConfig(Strict):
    """Local training shared by every algorithm: plain SGD on the client's split."""

    lr: float = Field(0.05, gt=0)
    local_epochs: int = Field(1, ge=1)
    local_steps: int | None = Field(None, ge=1, description="if set, a fixed number of SGD steps instead")
    batch_size: int = Field(16, ge=1)
    weight_decay: float = Field(0.0, ge=0)
    local_momentum: float = Field(0.0, ge=0, lt=1, description="client SGD momentum, reset every round")
    nesterov: bool = False
    weighting: Literal["samples", "uniform"] = "samples"
    name: str

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> AlgorithmConfig:
        if self.nesterov and self.local_momentum == 0:
            raise ValueError("nesterov needs local_momentum > 0")
        return self

    def client_weight(self, n_samples: int) -> float:
        """A client's aggregation weight: its training samples, or 1 each under ``weighting: uniform``."""
        return 1.0 if self.weighting == "uniform" else float(n_samples)


AlgorithmFactory = Callable[[Any, int], Any]  # (its config, population size) -> an Algorithm


@dataclass(frozen=True)
class AlgorithmEntry:
    name: str
    config: type[AlgorithmConfig]
    factory: AlgorithmFactory


_ALGORITHMS: dict[str, AlgorithmEntry] = {}


def _names(config: type[AlgorithmConfig]) -> tuple[str, ...]:
    field = config.model_fields["name"]
    names = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is Literal else ()
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{config.__name__}.name must be a Literal of the algorithm's name(s)")
    return tuple(names)


def register_algorithm(config: type[AlgorithmConfig], factory: AlgorithmFactory) -> None:
    """Register the algorithm(s) ``config.name`` names: ``factory(config, num_clients)`` builds one."""
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


def parse_algorithm(value: Any) -> AlgorithmConfig:
    """The registered config class named by ``value["name"]``, validated; a ValueError says what is wrong."""
    if isinstance(value, AlgorithmConfig):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping with a 'name' (one of {', '.join(algorithm_names())})")
    name = value.get("name")
    entry = algorithm_entry(name) if isinstance(name, str) else None
    if entry is None:  # worded as pydantic words an unknown tag of the other sections' unions
        tags = ", ".join(repr(n) for n in algorithm_names())
        raise ValueError(
            f"Input tag {repr(name)[:64]} found using 'name' does not match any of the expected tags: {tags}"
        )
    try:
        return entry.config.model_validate(value)
    except ValidationError as exc:
        raise SubConfigError(exc, entry.config) from None


def default_algorithm() -> AlgorithmConfig:
    return parse_algorithm({"name": "fedavg"})
