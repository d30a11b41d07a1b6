"""Ditto (Li et al., ICML 2021): a global model by FedAvg plus a personal model per client.

The personal model ``v_i`` is trained on the client's data with a pull ``lam * (v_i - w_global)`` towards the
global model; ``lam = 0`` is purely local training, a large ``lam`` stays at the global model.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from fedsim.algorithms.base import ClientContext, ClientResult, ClientState
from fedsim.algorithms.fedavg import FedAvg, weighted_delta
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.config import AlgorithmConfig
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica


class DittoConfig(AlgorithmConfig):
    kind: Literal["ditto"]
    lam: float = Field(0.1, ge=0, description="pull of the personal model towards the global one")
    personal_lr: float | None = Field(None, gt=0, description="the personal models' step size (None: lr)")
    adds_mean: ClassVar[bool] = True


class Ditto:
    """Sums the FedAvg delta of the global copy; the client state is ``{"personal": v_i}`` (full flat state)."""

    name = "ditto"
    stateful = True

    def __init__(self, cfg: DittoConfig) -> None:
        self.cfg = cfg
        self._delta: Tensor | None = None  # one scratch buffer per device, reused by every client

    # the global copy is FedAvg's: the same sums and server step, no server state
    sum_sizes = FedAvg.sum_sizes
    broadcast_numel = FedAvg.broadcast_numel
    server_update = FedAvg.server_update
    state_dict = FedAvg.state_dict
    load_state_dict = FedAvg.load_state_dict

    def personal_model(self, state: ClientState | None) -> Tensor | None:
        """The client's personal flat model (federated evaluation scores it on the client's held-out data)."""
        return None if state is None else state.get("personal")

    def client_update(
        self, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
    ) -> ClientResult:
        opt = ctx.local_settings(self.cfg)  # the round's local training (a local_steps knob)
        stats = local_sgd(replica, data, opt, ctx)
        if self._delta is None or self._delta.numel() != replica.numel:
            self._delta = replica.flat.new_empty(replica.numel)
        delta = self._delta.copy_(weighted_delta(replica, ctx))

        replica.load_(state["personal"] if state is not None else ctx.global_state)
        anchor = ctx.global_state[: replica.n_params]
        lam = self.cfg.lam

        def pull() -> None:
            replica.grad.add_(replica.params, alpha=lam).add_(anchor, alpha=-lam)

        personal = local_sgd(replica, data, opt, ctx, grad_hook=pull, lr=self.cfg.personal_lr, keep_state=False)
        return ClientResult(
            {"delta": delta},
            stats.loss,
            stats.samples,
            stats.steps,
            state={"personal": replica.flat.clone()},
            metrics={"personal_loss": personal.loss},
        )
