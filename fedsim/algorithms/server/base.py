"""The server's step: a server optimiser applied to each round's mean update, on every rank alike.

A server optimiser is one small object (:class:`ServerOptimizer`) registered by its settings class
(:mod:`fedsim.config.server_optimizer`): ``step_`` moves the model's parameters, one flat segment, by a mean
update ``delta``, the negative of the pseudo-gradient, at step size ``lr``; its state is a mapping of tensors
that a checkpoint keeps. :class:`ServerStep` is the one place that applies it: it asks the schedule for the
step's ``lr``, gives float buffers the mean as it is, and counts the steps taken.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from fedsim.algorithms.base import Algorithm, MeanUpdate
from fedsim.config import ConfigError
from fedsim.config.server_optimizer import SERVER_OPTIMIZERS, ServerOptimizerConfig


@dataclass(frozen=True)
class ServerOptimizerContext:
    """What a server optimiser is built with: ``sizes``, the number of entries of each parameter tensor in the
    flat model's order (their sum is the parameter segment's length; LAMB's trust ratio is per tensor)."""

    sizes: tuple[int, ...]

    @property
    def n_params(self) -> int:
        return sum(self.sizes)

    @classmethod
    def of(cls, shapes: tuple[tuple[int, ...], ...], n_params: int) -> ServerOptimizerContext:
        """From a flat model's tensor ``shapes`` (parameters first, then buffers) and its ``n_params``."""
        sizes, total = [], 0
        for shape in shapes:
            if total >= n_params:
                break
            sizes.append(math.prod(shape))
            total += sizes[-1]
        return cls(tuple(sizes))


class ServerOptimizer(Protocol):
    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        """Move the parameters ``x`` (flat, in place) by the mean update ``delta`` at step size ``lr``."""
        ...

    def state_dict(self) -> dict[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None: ...


class Moments:
    """Named state tensors of the parameters' length, made on first use on the parameters' device (zeros, or
    ``initial`` for the names it gives) and moved there after a checkpoint restored them on the host."""

    def __init__(self, names: tuple[str, ...], initial: Mapping[str, float] | None = None) -> None:
        self.names, self.initial = names, dict(initial or {})
        self.tensors: dict[str, Tensor] = {}

    def on(self, like: Tensor) -> dict[str, Tensor]:
        if not self.tensors:
            self.tensors = {n: torch.full_like(like, self.initial.get(n, 0.0)) for n in self.names}
        elif self.tensors[self.names[0]].device != like.device:
            self.tensors = {n: t.to(like.device) for n, t in self.tensors.items()}
        return self.tensors

    def state_dict(self) -> dict[str, Tensor]:
        return {n: t.clone() for n, t in self.tensors.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.tensors = {n: state[n].clone() for n in self.names if n in state}
        if len(self.tensors) != len(self.names):  # none saved (no step taken yet), or an older snapshot's
            self.tensors = {}


class ServerStep:
    """The run's server optimiser and where it is in its schedule (``steps``: server steps taken)."""

    def __init__(self, cfg: ServerOptimizerConfig, context: ServerOptimizerContext) -> None:
        self.cfg, self.context = cfg, context
        self.optimizer: ServerOptimizer | None = None if cfg.is_plain else SERVER_OPTIMIZERS.build(cfg, context)
        self.steps = 0

    def reconfigure(self, cfg: ServerOptimizerConfig) -> None:
        """Step with ``cfg``'s settings (the same kind) from the next step on; the optimiser's state (moments,
        the step count) goes on, and sgd given momentum starts its buffer at zero."""
        if cfg.kind != self.cfg.kind:
            raise ConfigError(f"server_optimizer.kind: a run cannot change its server optimiser ({self.cfg.kind!r})")
        state = self.state_dict()
        self.cfg = cfg
        self.optimizer = None if cfg.is_plain else SERVER_OPTIMIZERS.build(cfg, self.context)
        self.load_state_dict(state)

    def lr(self) -> float:
        """This step's size: ``lr`` times the schedule's factor."""
        return self.cfg.lr * self.cfg.schedule.factor(self.steps)

    def step_(self, algorithm: Algorithm, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> None:
        """The algorithm's server half on a round's global ``sums``, then this step with the update it returns
        (an algorithm that moves the model itself returns none: only the plain step may then be asked for)."""
        update = algorithm.server_update(global_state, sums, n_params)
        if update is not None:
            self.apply_(global_state, update, n_params)
        elif not self.cfg.adds_mean:
            raise ConfigError(
                f"server_optimizer.kind={self.cfg.kind}: algorithm {algorithm.name} moves the model itself and"
                " hands the server no update to step with"
            )

    def apply_(self, global_state: Tensor, update: MeanUpdate, n_params: int) -> None:
        """Move ``global_state`` (in place) by ``update``: sgd without momentum adds ``lr`` times it to the whole
        state; any other optimiser steps the parameters and adds the buffers' mean as it is."""
        lr = self.lr()
        if self.optimizer is None:
            global_state.add_(update.total, alpha=update.alpha(lr))
        else:
            mean = update.mean()
            global_state[n_params:].add_(mean[n_params:])
            self.optimizer.step_(global_state[:n_params], mean[:n_params], lr)
        self.steps += 1

    def state_dict(self) -> dict[str, Tensor]:
        own = {} if self.optimizer is None else self.optimizer.state_dict()
        return {**own, "steps": torch.tensor(self.steps, device="cpu")}  # a count, for the checkpoint

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.steps = int(state["steps"]) if "steps" in state else 0
        if self.optimizer is not None:
            self.optimizer.load_state_dict({k: v for k, v in state.items() if k != "steps"})
