"""The ranks' local sums combined by one all-reduce, every rank's client records gathered (the malicious
clients' losses as they report them, ``attack.reported_loss``), and the rows your own stages read gathered
beside them. FedBuff's buffer hands sums that are global already: nothing to do."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.record import as_reported
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step


@register_step
@dataclass(frozen=True)
class AllReduce(Step):
    name = "all_reduce"
    run: RunParts

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        summed = [PlannedStage("all_reduce", "server", "sum", {"devices": cfg.devices})]
        attack = cfg.attack
        if not attack.lies_about_loss:
            return summed
        # who reads the malicious clients' lie, from what each declares it reads
        readers = [f"selection.kind={cfg.selection.kind}"] if cfg.selection.reads_clients else []
        read_by = ", ".join([*readers, "run store client_runs.loss and rounds.train_loss"])
        said = {"reported_loss": attack.reported_loss, "read_by": read_by}
        return [*summed, PlannedStage("report_loss", "server", attack.kind, said)]

    @classmethod
    def build(cls, run: RunParts) -> AllReduce:
        return cls(run)

    def apply_(self, at: ServerRound) -> None:
        if at.summed:
            return
        pool = self.run.pool
        at.ledger.record_moved(pool.all_reduce_(self.run.executor.local_sum.flat))
        gathered, moved = pool.all_gather(at.records)
        at.ledger.record_moved(moved)
        at.records = sorted(chain.from_iterable(gathered), key=lambda rec: (rec.device, rec.start))
        at.records = as_reported(at.records, self.run.attack, at.index)  # what the clients said: all read after
        at.summed, at.trained = True, bool(at.records)
        if at.gathered is not None:
            at.gathered(at.records)
        at.rows = self.run.server_stages.gathered(at.all_reduce, at.ledger)  # None: no stage of yours reads them
