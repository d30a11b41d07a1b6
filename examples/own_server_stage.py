"""Your own server step: a reputation kept per client across rounds, written here.

    python examples/own_server_stage.py                # from Python: an attacked run with and without it
    fedsim run examples/own_server_stage.yaml          # from YAML: server_stages names the class below

Before the aggregation rule (``at: before_rule``) the stage reads each client's update (its settings subclass
``RowsStageConfig``, so the round gathers the rows beside the sum) and scores it by its cosine similarity with
the coordinate-wise median of the round's updates, a reference the honest majority sets. Each client's
reputation is a running mean of its scores, in the manner of Xu and Lyu's reputation mechanism (RFFL, 2021):

    r_i <- decay * r_i + (1 - decay) * cos(u_i, median_j u_j)        (every client starts at r_i = start = 0)

RFFL's own code starts every reputation at 0 (``rs = torch.zeros(N + A)``, RFFL_run.py of
github.com/XinyiYS/Robust-and-Fair-Federated-Learning), as ``start`` does here; it scores against the round's
aggregate rather than the median, normalises the reputations to sum to 1 and removes a client for good, where
this stage lets it recover.

A client whose reputation falls below ``threshold`` is left out of the round (``view.leave_out_``: its whole
part of every sum comes off, its weighted update, its weight and count, FedNova's tau, SCAFFOLD's control
variate; the settings declare ``removes_clients``, so the round keeps those parts), this round and every later
round until its reputation recovers. If every client is left out the round fails and the model stays. The
reputations (one float per client, a tensor) and the exclusions go into every checkpoint, so a resumed run
leaves out whom the uninterrupted one does; each round's row keeps ``reputation.left_out`` and
``reputation.mean``. Nothing in fedsim is edited: the decorator registers the kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config import RowsStageConfig, register_server_stage
from fedsim.sim.server_stages import ServerView, StageContext


class ReputationConfig(RowsStageConfig):
    kind: Literal["reputation"] = "reputation"
    at: Literal["before_rule"] = "before_rule"
    reads_records: ClassVar[bool] = False  # it scores each update; the clients' loss and sizes it never reads
    removes_clients: ClassVar[bool] = True  # it takes clients out of the round's sums (view.leave_out_)
    decay: float = Field(0.5, ge=0, lt=1, description="the reputation's weight on its past")
    threshold: float = Field(0.1, ge=-1, le=1, description="a client below this reputation is left out")
    start: float = Field(0.0, ge=-1, le=1, description="the reputation of a client not yet heard from")


def cosine_to_median(rows: Tensor) -> Tensor:
    """(n,) each row's cosine similarity with the coordinate-wise median of the rows (0 for a zero vector)."""
    median = rows.median(0).values
    norms = torch.linalg.vector_norm(rows, dim=1) * torch.linalg.vector_norm(median)
    return torch.where(norms > 0, rows @ median / norms.clamp_min(1e-30), torch.zeros_like(norms))


@register_server_stage(ReputationConfig)
class Reputation:
    def __init__(self, cfg: ReputationConfig, context: StageContext) -> None:
        self.cfg = cfg
        self.reputation = torch.full((context.population,), cfg.start, dtype=torch.float64)
        self.left_out: list[list[int]] = []  # [round, client] for every update it left out
        self.last: dict[str, float] = {}

    def begin_round(self, r: int, cohort: Sequence[int]) -> None:
        self.last = {}

    def apply_(self, view: ServerView) -> bool:
        rows = view.rows
        if rows is None or rows.n == 0:
            return False
        updates = rows.rows[:, : view.n_params].double()  # the parameters' updates; buffers are not scored
        cids = torch.tensor(rows.cids)
        decay = self.cfg.decay
        self.reputation[cids] = decay * self.reputation[cids] + (1 - decay) * cosine_to_median(updates).cpu()
        out = [i for i, cid in enumerate(rows.cids) if self.reputation[cid] < self.cfg.threshold]
        view.leave_out_(rows.cids[i] for i in out)  # their whole part of every sum, whatever the algorithm
        self.left_out += [[view.round, rows.cids[i]] for i in out]
        self.last = {"left_out": float(len(out)), "mean": float(self.reputation[cids].mean())}
        return len(out) == rows.n  # nobody is left: the model stays

    def round_metrics(self) -> dict[str, float]:
        return self.last

    def state_dict(self) -> dict[str, Any]:
        return {"left_out": self.left_out}

    def tensors(self) -> dict[str, Tensor]:
        return {"reputation": self.reputation}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.left_out = [[int(r), int(c)] for r, c in state.get("left_out", [])]
        if "reputation" in tensors:
            self.reputation = tensors["reputation"].to(torch.float64)


if __name__ == "__main__":
    from fedsim import Simulation

    for stages in ([], [{"kind": "reputation"}]):
        config = {
            "name": "own-server-stage" + ("-reputation" if stages else ""),
            "rounds": 20,
            "clients_per_round": 8,
            "progress": False,
            "data": {"dataset": "digits", "clients": 40},
            "model": {"kind": "mlp", "hidden": [32]},
            "algorithm": {"kind": "fedavg", "lr": 0.3},
            "attack": {"kind": "sign_flip", "fraction": 0.2, "scale": 4.0},
            "server_stages": stages,
        }
        summary = Simulation(config, out=f"runs/{config['name']}").run()
        print(f"{config['name']}: final_accuracy={summary.final_accuracy:.4f}")
