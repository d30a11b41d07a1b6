"""How the server applies a round's update (``server_optimizer:``): a registry of server optimisers.

Every algorithm with a server hands it the round's *mean update* ``Delta`` (FedAvg's weighted mean delta;
FedNova's rescaled normalised one; what the algorithm declares), the negative of Reddi et al.'s
pseudo-gradient. The server optimiser moves the model's parameters by it, at ``lr`` times ``schedule``'s
factor of the server step; float buffers (BatchNorm statistics) are not parameters and take the mean as it is.

- ``sgd``: ``x += lr * Delta``, with ``momentum`` (heavy ball, FedAvgM of Hsu et al. 2019) and ``nesterov``
  as torch.optim.SGD takes them (its gradient is ``-Delta``). Without momentum it moves the whole state, the
  buffers too, by ``lr * Delta``: every algorithm's server step at ``server_lr``.
- ``adam``, ``adagrad``: torch.optim.Adam's and torch.optim.Adagrad's steps on ``-Delta``.
- ``lamb`` (You et al., ICLR 2020): Adam's bias-corrected direction plus ``weight_decay * x``, scaled per
  tensor by the trust ratio ``||x|| / ||direction||``.
- ``fedadam``, ``fedyogi``, ``fedadagrad``: Reddi et al., ICLR 2021, Algorithm 2 as written, with adaptivity
  ``tau`` outside the square root, no bias correction and ``v`` starting at ``tau**2``.

A kind of your own subclasses :class:`ServerOptimizerConfig` and registers its builder with
:func:`register_server_optimizer`; YAML names it with ``factory:``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from fedsim.config.registry import Registry, StageConfig
from fedsim.config.task import LrSchedule


class ServerOptimizerConfig(StageConfig):
    """The server's step size ``lr`` and its ``schedule`` over server steps."""

    lr: float = Field(1.0, gt=0, le=1e6)
    schedule: LrSchedule = LrSchedule()

    @property
    def is_plain(self) -> bool:
        """Whether the server adds ``lr`` times the mean update to the whole state and keeps no state of its own
        (sgd without momentum): what every algorithm's server did at ``server_lr``."""
        return False

    @property
    def adds_mean(self) -> bool:
        """Whether the server adds the mean update as it is, every step (plain sgd at lr 1, no schedule)."""
        return self.is_plain and self.lr == 1.0 and self.schedule == LrSchedule()


class SgdServer(ServerOptimizerConfig):
    kind: Literal["sgd"] = "sgd"
    momentum: float = Field(0.0, ge=0, lt=1)
    nesterov: bool = False

    @property
    def is_plain(self) -> bool:
        return self.momentum == 0

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> SgdServer:
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov needs momentum > 0")
        return self


class MomentsServer(ServerOptimizerConfig):
    """An optimiser with Adam's two moments (``beta1``, ``beta2``) and ``eps`` added to the root of the second."""

    lr: float = Field(0.01, gt=0, le=1e6)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.999, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0, le=1)


class AdamServer(MomentsServer):
    kind: Literal["adam"] = "adam"


class AdagradServer(ServerOptimizerConfig):
    kind: Literal["adagrad"] = "adagrad"
    lr: float = Field(0.01, gt=0, le=1e6)
    eps: float = Field(1e-10, gt=0, le=1)
    initial_accumulator_value: float = Field(0.0, ge=0, le=1e6)


class LambServer(MomentsServer):
    kind: Literal["lamb"] = "lamb"
    eps: float = Field(1e-6, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0, le=1e3)


class AdaptiveServer(ServerOptimizerConfig):
    """Reddi et al.'s FedAdam, FedYogi and FedAdagrad (their defaults: ``beta2`` 0.99, ``tau`` 1e-3)."""

    lr: float = Field(0.01, gt=0, le=1e6)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0, le=1e3, description="adaptivity: outside the square root, v starts at tau^2")


class FedAdamServer(AdaptiveServer):
    kind: Literal["fedadam"] = "fedadam"


class FedYogiServer(AdaptiveServer):
    kind: Literal["fedyogi"] = "fedyogi"


class FedAdagradServer(AdaptiveServer):
    kind: Literal["fedadagrad"] = "fedadagrad"


SERVER_OPTIMIZERS = Registry[ServerOptimizerConfig](
    "server_optimizer",
    ServerOptimizerConfig,
    builtin="fedsim.algorithms.server",
    default="sgd",
    decorator="register_server_optimizer",
)
register_server_optimizer = SERVER_OPTIMIZERS.register


class SpellingNote(FutureWarning):
    """An old spelling that still loads, and its new one (``fedsim run`` prints it as one ``note:`` line)."""


# algorithms that were FedAvg plus a server optimiser: their name, the optimiser's kind and its settings' old names
_FEDOPT = {"fedadam": "fedadam", "fedyogi": "fedyogi", "fedavgm": "sgd"}
_MOVED = {"server_lr": "lr", "server_lr_schedule": "schedule", "beta1": "beta1", "beta2": "beta2", "tau": "tau"}


def respelled(tree: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """A run's tree with the server's step moved out of ``algorithm`` into ``server_optimizer``, and the note
    that says so (None when nothing moved): ``algorithm.name`` fedadam, fedyogi or fedavgm become fedavg with
    the optimiser of that name (fedavgm's: sgd with its momentum), and any algorithm's ``server_lr`` and
    ``server_lr_schedule`` become the optimiser's ``lr`` and ``schedule``."""
    algorithm = tree.get("algorithm")
    if not isinstance(algorithm, dict):
        return tree, None
    name = algorithm.get("name")
    fedopt = isinstance(name, str) and name in _FEDOPT
    movable = (*_MOVED, "momentum") if fedopt else ("server_lr", "server_lr_schedule")
    moved = {k: algorithm[k] for k in movable if k in algorithm}
    if not fedopt and not moved:
        return tree, None
    kind = _FEDOPT[str(name)] if fedopt else "sgd"
    optimizer = {"kind": kind, **{_MOVED.get(k, k): v for k, v in moved.items()}}
    if name == "fedavgm":
        optimizer.setdefault("momentum", 0.9)  # FedAvgM's default momentum
    if tree.get("server_optimizer") not in (None, {}):
        raise ValueError(
            f"algorithm: {', '.join(moved) or f'name={name}'} and server_optimizer both set the server's step;"
            f" give server_optimizer alone (server_optimizer.kind={kind})"
        )
    rest = {k: v for k, v in algorithm.items() if k not in moved}
    new = {**tree, "algorithm": {**rest, "name": "fedavg" if fedopt else name}, "server_optimizer": optimizer}
    spelled = ", ".join(f"{k}={v}" for k, v in optimizer.items() if k != "kind")
    old = f"algorithm.name={name}" if fedopt else f"algorithm.{'/'.join(moved)}"
    note = (
        f"{old} is spelled server_optimizer.kind={kind}"
        + (f" ({spelled})" if spelled else "")
        + (" with algorithm.name=fedavg" if fedopt else "")
        + " now"
    )
    return new, note


def server_optimizer_refusal(run: Any) -> str | None:
    """Why ``run`` (a RunConfig) has no server step for its optimiser to set, or None: no server, elected
    models, FedAsync's mixing, 1-bit LAMB's own server half."""
    opt, name = run.server_optimizer, run.algorithm.name
    if opt.adds_mean:
        return None
    if run.decentralised:
        why = f"a decentralised run (algorithm.name={name}) has no server"
    elif type(run.algorithm).elects_leaders:
        why = f"algorithm.name={name} adopts its elected leaders' models"
    elif run.asynchronous.mode == "fedasync":
        why = "asynchronous.mode=fedasync mixes each local model in at its own weight (use mode=fedbuff)"
    elif run.uplink.steps_server and not opt.is_plain:
        why = f"uplink.kind={run.uplink.kind} makes the server's step itself (LAMB)"
    else:
        return None
    return f"server_optimizer.kind={opt.kind}: {why}, so there is no server step to set"
