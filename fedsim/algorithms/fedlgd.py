"""Federated LGD (multi-leader LSGD, Teng et al., NeurIPS 2019, on the federated round loop).

The decentralised form (:mod:`fedsim.algorithms.lgd`) has every node train every round. Here clients are
sampled into cohorts as for FedAvg and SCAFFOLD, and each keeps its own model ``x_i`` in the state store. A
client of group ``g`` (``i % groups``: with ``groups`` = the run's devices, its home device, the paper's
workers of one machine) starts its round pulled toward the leaders the server broadcasts,

    x_i <- (1 - local_pull - global_pull) x_i + local_pull x_local[g] + global_pull x_global

(a client seen for the first time starts from ``x_global``), trains locally as any client does, keeps the
result as its new ``x_i`` and reports its mean training loss. Every ``period`` rounds the server elects, from
the cohort's reports, the lowest-loss client of each group (the local leaders) and of all (the global leader),
and only those clients upload their models (:mod:`fedsim.sim.rounds.leaders`). The global leader is the run's model:
the one evaluated, checkpointed and broadcast.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from fedsim.algorithms.base import ClientContext, ClientResult, ClientState
from fedsim.algorithms.lgd import LeaderPulls
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.config import AlgorithmConfig
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica

GLOBAL = -1  # the global leader's key among the elected, beside each group's


class FedLgdConfig(AlgorithmConfig, LeaderPulls):
    kind: Literal["fedlgd"]
    elects_leaders: ClassVar[bool] = True  # the server's model is an elected client's, not a mean of updates
    groups: int = Field(1, ge=1, le=1024, description="client i's group is i % groups; 1: a global leader only")


class FedLgd:
    """Sums each client's weighted loss (4 bytes on the wire); the client state is ``{"model": x_i}``; the
    server state is each group's local leader (the global one is the global model)."""

    name = "fedlgd"
    stateful = True

    def __init__(self, cfg: FedLgdConfig) -> None:
        self.cfg = cfg
        self.local: dict[int, Tensor] = {}  # group -> its local leader's model, on the replica's device

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"loss": 1}

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        return numel  # the client's local leader, beside the global one

    def group(self, cid: int) -> int:
        return cid % self.cfg.groups

    def personal_model(self, state: ClientState | None) -> Tensor | None:
        """The client's own model (federated evaluation scores it on the client's held-out data)."""
        return None if state is None else state.get("model")

    def client_update(
        self, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
    ) -> ClientResult:
        if state is not None:  # the replica holds x_global: pull the client's own model toward the leaders
            local = self.local.get(self.group(ctx.cid), ctx.global_state).to(replica.flat.device)
            cfg = self.cfg
            own = 1.0 - cfg.local_pull - cfg.global_pull
            replica.flat.mul_(cfg.global_pull).add_(state["model"], alpha=own).add_(local, alpha=cfg.local_pull)
        stats = local_sgd(replica, data, self.cfg, ctx)
        ctx.local_model_done(replica.flat)
        return ClientResult(
            {"loss": stats.loss.reshape(1) * ctx.weight},
            stats.loss,
            stats.samples,
            stats.steps,
            state={"model": replica.flat.clone()},
        )

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> None:
        return None  # the model moves only at an election (adopt), not by a server optimiser

    # ------------------------------------------------------------------------------------------ elections

    def elects(self, r: int) -> bool:
        return (r + 1) % self.cfg.period == 0

    def elect(self, losses: Mapping[int, float]) -> dict[int, int]:
        """The leaders by group (and :data:`GLOBAL`) from the cohort's reported ``losses`` by client: the lowest
        loss, ties to the lowest client; a NaN loss loses to every number."""

        def rank(cid: int) -> tuple[float, int]:
            loss = losses[cid]
            return (math.inf if math.isnan(loss) else loss, cid)

        leaders: dict[int, int] = {}
        for cid in sorted(losses, key=rank):
            leaders.setdefault(self.group(cid), cid)
        leaders[GLOBAL] = min(losses, key=rank)
        return leaders

    def adopt(self, global_state: Tensor, models: Mapping[int, Tensor]) -> None:
        """Take the elected leaders' ``models`` (by group and :data:`GLOBAL`); a group with no client in the
        cohort keeps its last leader."""
        for g, model in models.items():
            if g == GLOBAL:
                global_state.copy_(model)
            else:
                self.local[g] = model.clone()

    def state_dict(self) -> dict[str, Tensor]:
        return {f"local.{g}": model.clone() for g, model in self.local.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.local = {int(k.removeprefix("local.")): v.clone() for k, v in state.items() if k.startswith("local.")}
