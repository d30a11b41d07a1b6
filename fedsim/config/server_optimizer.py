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
- ``onebit_lamb``: 1-bit LAMB's server half (Li et al. 2022), beside the ``onebit`` uplink.

A kind of your own subclasses :class:`ServerOptimizerConfig` and registers its builder with
:func:`register_server_optimizer`; YAML names it with ``factory:``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from fedsim.config.compressor import COMPRESSORS
from fedsim.config.registry import Registry, StageConfig
from fedsim.config.task import LrSchedule


class ServerOptimizerConfig(StageConfig):
    """The server's step size ``lr`` and its ``schedule`` over server steps."""

    lr: float = Field(
        1.0, gt=0, le=1e6, description="the server's step size on the clients' mean update (1 with sgd: FedAvg)"
    )
    schedule: LrSchedule = Field(LrSchedule(), description="how lr changes over server steps")

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
    kind: Literal["sgd"] = Field(
        "sgd", description="SGD on the server (FedAvg at lr 1 without momentum; FedAvgM with it)"
    )
    momentum: float = Field(0.0, ge=0, lt=1, description="heavy-ball momentum (FedAvgM)")
    nesterov: bool = Field(False, description="Nesterov's momentum")

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

    lr: float = Field(0.01, gt=0, le=1e6, description="the server's step size")
    beta1: float = Field(0.9, ge=0, lt=1, description="the first moment's decay")
    beta2: float = Field(0.999, ge=0, lt=1, description="the second moment's decay")
    eps: float = Field(1e-8, gt=0, le=1, description="added to the second moment's root")


class AdamServer(MomentsServer):
    kind: Literal["adam"] = "adam"


class AdagradServer(ServerOptimizerConfig):
    kind: Literal["adagrad"] = Field("adagrad", description="Adagrad on the server")
    lr: float = Field(0.01, gt=0, le=1e6, description="the server's step size")
    eps: float = Field(1e-10, gt=0, le=1, description="added to the accumulator's root")
    initial_accumulator_value: float = Field(0.0, ge=0, le=1e6, description="the accumulator's starting value")


class LambServer(MomentsServer):
    kind: Literal["lamb"] = Field("lamb", description="LAMB on the server")
    eps: float = Field(1e-6, gt=0, le=1, description="added to the second moment's root")
    weight_decay: float = Field(0.0, ge=0, le=1e3, description="decoupled weight decay inside the trust ratio")


class OneBitLambServer(ServerOptimizerConfig):
    """1-bit LAMB's server half (Li et al. 2022; DeepSpeed's ``OnebitLamb``, whose defaults these are but ``lr``
    and ``warmup``), beside ``uplink.kind: onebit`` with the same ``warmup`` and ``beta`` (``beta1`` here): LAMB
    on the mean update for ``warmup`` steps, then on the clients' 1-bit momenta with the variance frozen and the
    trust ratio's frozen average scaled by the paper's factor."""

    kind: Literal["onebit_lamb"] = Field("onebit_lamb", description="1-bit LAMB's server half")
    lr: float = Field(0.03, gt=0, le=1e6, description="the server's step size")
    beta1: float = Field(0.9, ge=0, lt=1, description="the momentum's decay: the clients' (uplink.beta) too")
    beta2: float = Field(0.999, ge=0, lt=1, description="the second moment's decay")
    eps: float = Field(1e-4, gt=0, le=1, description="added to sqrt(v); DeepSpeed's 1e-8 lets 1-bit noise blow up")
    warmup: int = Field(5, ge=1, le=1_000_000, description="steps of plain LAMB: the clients' (uplink.warmup) too")
    min_coeff: float = Field(0.01, gt=0, description="the trust ratio's floor")
    max_coeff: float = Field(10.0, gt=0, description="the trust ratio's ceiling")
    coeff_beta: float = Field(0.9, ge=0, lt=1, description="decay of the warm-up ratio's running average")
    factor_min: float = Field(0.5, gt=0, description="the lower bound of the frozen trust-ratio scaling")
    factor_max: float = Field(4.0, gt=0, description="the upper bound of the frozen trust-ratio scaling")
    factor_threshold: float = Field(0.1, ge=0, lt=1, description="the factor's largest change a step")

    @model_validator(mode="after")
    def _ordered(self) -> OneBitLambServer:
        if self.min_coeff > self.max_coeff or self.factor_min > self.factor_max:
            raise ValueError("min_coeff <= max_coeff and factor_min <= factor_max")
        return self


class AdaptiveServer(ServerOptimizerConfig):
    """Reddi et al.'s FedAdam, FedYogi and FedAdagrad (their defaults: ``beta2`` 0.99, ``tau`` 1e-3)."""

    lr: float = Field(0.01, gt=0, le=1e6, description="the server's step size")
    beta1: float = Field(0.9, ge=0, lt=1, description="the first moment's decay")
    beta2: float = Field(0.99, ge=0, lt=1, description="the second moment's decay")
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


def server_optimizer_refusal(run: Any) -> str | None:
    """Why ``run`` (a RunConfig) has no server step for its optimiser to set, or None: no server, elected
    models, FedAsync's mixing; 1-bit LAMB's server without the clients' 1-bit momenta."""
    opt, name = run.server_optimizer, run.algorithm.kind
    if opt.adds_mean:
        return None
    if run.decentralised:
        why = f"a decentralised run (algorithm.kind={name}) has no server"
    elif type(run.algorithm).elects_leaders:
        why = f"algorithm.kind={name} adopts its elected leaders' models"
    elif run.asynchronous.kind == "fedasync":
        why = "asynchronous.kind=fedasync mixes each local model in at its own weight (use kind=fedbuff)"
    elif isinstance(opt, OneBitLambServer):
        return onebit_lamb_refusal(opt, run.uplink)
    else:
        return None
    return f"server_optimizer.kind={opt.kind}: {why}, so there is no server step to set"


def onebit_lamb_refusal(opt: OneBitLambServer, uplink: Any) -> str | None:
    """1-bit LAMB's server reads the clients' 1-bit momenta after its warm-up: the ``onebit`` uplink's, with the
    same warm-up and momentum decay."""
    if not type(uplink).sends_momenta:  # what the compressor declares, not its name
        senders = COMPRESSORS.kinds_declaring(lambda config: config.sends_momenta)
        return (
            f"server_optimizer.kind=onebit_lamb reads the clients' 1-bit momenta after its warm-up: set"
            f" uplink.kind={' or '.join(senders)}, not {uplink.kind}"
        )
    if (opt.warmup, opt.beta1) != (uplink.warmup, uplink.beta):
        return (
            f"server_optimizer.warmup={opt.warmup} and beta1={opt.beta1:g} must equal uplink.warmup={uplink.warmup}"
            f" and beta={uplink.beta:g}: the server's warm-up and momentum are the clients'"
        )
    return None
