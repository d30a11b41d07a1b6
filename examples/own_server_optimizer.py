"""Your own server optimiser: FedAMS (Wang, Lin and Chen, ICML 2022), written here.

    python examples/own_server_optimizer.py            # from Python: fedadam against fedams
    fedsim run examples/own_server_optimizer.yaml      # from YAML: server_optimizer.factory names the class below

FedAMS is FedAdam with AMSGrad's second moment: the server keeps the running maximum ``v_hat = max(v_hat, v)``
and steps ``x += lr * m / (sqrt(v_hat) + eps)``, so a round of small updates cannot inflate the step (their
Algorithm 2, FedAMS). The server optimiser sees the round's mean update ``delta`` (the negative of the
pseudo-gradient) on the model's parameters and moves them in place; its state is a mapping of tensors that a
checkpoint keeps, so a resumed run steps as the uninterrupted one. Every algorithm with a server takes it
(fedavg, fedprox, scaffold, fednova, ditto). Nothing in fedsim is edited: the decorator registers the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field
from torch import Tensor

from fedsim.algorithms.server import Moments, ServerOptimizerContext
from fedsim.config import ServerOptimizerConfig, register_server_optimizer


class FedAmsConfig(ServerOptimizerConfig):
    kind: Literal["fedams"] = "fedams"
    lr: float = Field(0.01, gt=0, le=1e6, description="the server's step size")
    beta1: float = Field(0.9, ge=0, lt=1, description="the first moment's decay")
    beta2: float = Field(0.99, ge=0, lt=1, description="the second moment's decay")
    eps: float = Field(1e-3, gt=0, le=1, description="the paper's epsilon, outside the square root")


@register_server_optimizer(FedAmsConfig)
class FedAms:
    def __init__(self, cfg: FedAmsConfig, context: ServerOptimizerContext) -> None:
        self.cfg = cfg
        self.moments = Moments(("m", "v", "v_hat"))  # made on the parameters' device at the first step

    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        cfg, state = self.cfg, self.moments.on(x)
        m, v, v_hat = state["m"], state["v"], state["v_hat"]
        m.mul_(cfg.beta1).add_(delta, alpha=1 - cfg.beta1)
        v.mul_(cfg.beta2).addcmul_(delta, delta, value=1 - cfg.beta2)
        v_hat.copy_(v_hat.maximum(v))
        x.addcdiv_(m, v_hat.sqrt().add_(cfg.eps), value=lr)

    def state_dict(self) -> dict[str, Tensor]:
        return self.moments.state_dict()

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.moments.load_state_dict(state)


if __name__ == "__main__":
    from fedsim import Simulation

    for kind in ("fedadam", "fedams"):
        config = {
            "name": f"own-server-optimizer-{kind}",
            "rounds": 10,
            "clients_per_round": 5,
            "progress": False,
            "data": {"dataset": "digits", "clients": 40},
            "model": {"kind": "mlp", "hidden": [32]},
            "algorithm": {"kind": "fedavg", "lr": 0.1},
            "server_optimizer": {"kind": kind, "lr": 0.03},
        }
        summary = Simulation(config, out=f"runs/own-server-optimizer-{kind}").run()
        print(f"{kind}: final_accuracy={summary.final_accuracy:.4f}")
