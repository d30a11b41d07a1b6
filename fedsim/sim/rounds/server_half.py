"""The server's half of a round in order, written once for the synchronous round and FedBuff's step.

After the sums are global: SecAgg+ unmasks, your stages before the rule run, the aggregation rule puts its
aggregate in the sums, central DP releases the noised sum over its fixed denominator, your stages after the
release run, the algorithm's server update moves the model through the server optimiser, and your stages after
the update run. Once a step fails (a SecAgg+ round that could not be unmasked, a rule short of updates, a stage
of yours that says so) the sums are not read again and the model stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from fedsim.algorithms.base import Algorithm
from fedsim.algorithms.server import ServerStep
from fedsim.comm.ledger import ByteLedger
from fedsim.sim.server_stages import ServerStages, ServerView

if TYPE_CHECKING:  # dp-accounting and the cryptography libraries load only in a run that asks for them
    from fedsim.privacy.dp import DifferentialPrivacy
    from fedsim.privacy.secagg import SecAggPlus
    from fedsim.robust import RobustAggregation


@dataclass(frozen=True)
class ServerHalf:
    """The run's server steps as they are this round (the algorithm may have been rebuilt by a reconfigure)."""

    secagg: SecAggPlus | None
    stages: ServerStages
    robust: RobustAggregation | None
    privacy: DifferentialPrivacy | None
    server_step: ServerStep
    algorithm: Algorithm

    def apply_(
        self, view: ServerView, model: Tensor, all_reduce: Callable[[Tensor], int], ledger: ByteLedger, trained: bool
    ) -> bool:
        """Every step in order on ``view``'s global sums, moving ``model`` in place; ``trained``: some client's
        update is in the sums (without one, and without DP's noise to release, the model stays). Returns
        whether a step failed the round."""
        sums = view.sums
        failed = self.secagg is not None and self.secagg.aggregate_(all_reduce, sums, ledger)
        failed = failed or self.stages.at("before_rule", view)
        if self.robust is not None and not failed:
            failed = self.robust.aggregate_(all_reduce, sums, ledger)
        central = self.privacy is not None and self.privacy.central
        if self.privacy is not None and central and not failed:  # noise, denominator, the clip's move
            self.privacy.release_(sums, view.round)
        failed = failed or self.stages.at("after_release", view)
        if not failed and (trained or central):
            self.server_step.step_(self.algorithm, model, sums, view.n_params)
            self.stages.at("after_update", view)
        return failed
