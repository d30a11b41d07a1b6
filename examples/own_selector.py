"""Your own client selector: the least-served candidates first, written here.

    python examples/own_selector.py                    # from Python, uniform against least_served
    fedsim run examples/own_selector.yaml              # from YAML: selection.factory names the class below

Each round draws ``candidates`` clients uniformly, then keeps the cohort of those that have trained the fewest
rounds so far (ties in a random order keyed by the seed and the round): every client is heard from about as
often, a fairness rule of the kind FedScale's selectors start from. It reads what fedsim records for every
selector (:class:`fedsim.sim.selection.ClientReports`: each client's last loss, its rounds, the last one);
its state is the reports, so a checkpoint keeps it and a resumed run chooses as the uninterrupted one. Nothing
in fedsim is edited: the decorator registers the kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field
from torch import Tensor

from fedsim.config import SelectionConfig, register_selector
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.selection import ClientReports, SelectionContext


class LeastServedConfig(SelectionConfig):
    kind: Literal["least_served"] = "least_served"
    reads_clients: ClassVar[bool] = False  # it reads how often a client trained, never what it reported
    # samples_uniformly stays False: its cohorts are near round-robin, so it is refused beside DP
    candidates: int = Field(20, ge=1, description="clients drawn uniformly before the least-served are kept")


@register_selector(LeastServedConfig)
class LeastServed:
    def __init__(self, cfg: LeastServedConfig, context: SelectionContext) -> None:
        self.cfg, self.context, self.reports = cfg, context, ClientReports()

    def select(self, r: int) -> list[int]:
        c = self.context
        drawn = sample_cohort(c.seed, r, c.population, min(self.cfg.candidates, c.population), c.availability)
        tie = np.random.default_rng([c.seed, r, 7]).random(len(drawn))
        served = [self.reports.rounds.get(cid, 0) for cid in drawn]
        chosen = np.lexsort((tie, served))[: c.cohort]  # fewest rounds first, then the random order
        return sorted(drawn[i] for i in chosen)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        self.reports.observe(r, records)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def tensors(self) -> dict[str, Tensor]:
        return self.reports.tensors()

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.reports.load(tensors)


if __name__ == "__main__":
    from fedsim import Simulation

    for kind in ("uniform", "least_served"):
        config = {
            "name": f"own-selector-{kind}",
            "rounds": 10,
            "clients_per_round": 5,
            "progress": False,
            "data": {"dataset": "digits", "clients": 40},
            "model": {"kind": "mlp", "hidden": [32]},
            "algorithm": {"kind": "fedavg", "lr": 0.1},
            "selection": {"kind": kind},
        }
        summary = Simulation(config, out=f"runs/own-selector-{kind}").run()
        print(f"{kind}: final_accuracy={summary.final_accuracy:.4f}")
