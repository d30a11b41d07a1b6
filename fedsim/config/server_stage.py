"""Server steps of your own (``server_stages:``): each one a registered kind, run at a named point of the round.

A stage's settings class subclasses :class:`ServerStageConfig` with ``kind: Literal["..."]`` and its own fields,
and registers its builder with :func:`register_server_stage`; YAML names it with ``factory:`` (the module is
imported, which registers it). ``at`` says where in the server's half of the round it runs:

- ``before_rule``: on the clients' summed updates as the all-reduce (and SecAgg+'s unmasking) left them,
  before the aggregation rule and DP's release;
- ``after_release``: on the sums the server optimiser will read (after the rule and DP's noise);
- ``after_update``: on the new global model, before the downlink broadcasts it.

A stage declares what it reads, and every refusal is derived from that, never from its kind's name:

- ``reads_rows`` (a stage whose settings subclass :class:`RowsStageConfig`): each client's update
  (``view.rows``), gathered beside the sum;
- ``reads_records``: the clients' records (``view.records``: each one's training loss, samples and seconds),
  un-noised statistics of their data. Default True: a stage that declares nothing is assumed to read them.
  One that declares False is handed a view without them.
- ``removes_clients``: it takes clients out of the round (``view.leave_out_``): the round keeps each client's
  part of every summed segment (FedNova's tau, SCAFFOLD's control variate, the weight, the count) beside its
  update row, so that what is left is the sum of a round those clients never reported in. It runs
  ``before_rule`` and reads rows (a :class:`RowsStageConfig`); it is refused beside a rule that combines
  the rows it gathered itself (``aggregator.gathers``: the left-out rows would still be in them), and, as any
  stage that reads rows, beside an algorithm whose model is not a function of the sums (``elects_leaders``:
  FedLGD elects it from the clients' reports).
- ``sets_update``: it sets the round's update itself from the rows (writes ``view.sums["delta"]`` and the rows
  it combined, so that the sum stays the rows' weighted sum), as FlexLoRA's SVD of the clients' LoRA products
  does; it is refused beside a rule that combines the rows it gathered itself (``aggregator.gathers``), which
  would replace that update with its own, and beside an algorithm that does not add the rows' mean to the model
  (``adds_mean`` False: FedNova rescales each client's update by its steps).

Under differential privacy a stage that reads the records is refused (the accountant covers the model, not
what the clients report); under central DP also one that reads each client's update (its release would
depend on un-noised rows) or runs ``before_rule`` (it would change the sum whose sensitivity the accountant
assumes). What remains, a stage after the release over the released sums and the model, is post-processing.

The plan (``fedsim run --plan``), summary.json's ``stages`` and the checkpoint take every stage from this
list: a stage of your own touches no file of fedsim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from fedsim.config.privacy import PrivacyConfig
from fedsim.config.registry import Registry, StageConfig

if TYPE_CHECKING:
    from fedsim.config.algorithm import AlgorithmBase
    from fedsim.config.robust import AggregatorConfig

Point = Literal["before_rule", "after_release", "after_update"]
POINTS: tuple[Point, ...] = ("before_rule", "after_release", "after_update")


class ServerStageConfig(StageConfig):
    """Where the stage runs (``at``); its kind's own settings beside it."""

    at: Point = Field("after_release", description="the point of the round where the stage runs")
    reads_rows: ClassVar[bool] = False  # needs each client's update: the round gathers them beside the sum
    reads_records: ClassVar[bool] = True  # reads the clients' records (loss, samples, seconds); undeclared: yes
    removes_clients: ClassVar[bool] = False  # takes clients' whole part off the round's sums (view.leave_out_)
    sets_update: ClassVar[bool] = False  # writes the round's update itself from the rows (sums["delta"], the rows)

    def refusal(self, secagg: bool, privacy: PrivacyConfig) -> str | None:
        """Why the stage cannot run in this round (None: it can), from what it declares: SecAgg+ hides each
        client's update; under DP the accountant covers neither the clients' records nor, under central DP,
        each client's un-noised update or a change to the sum before the release."""
        if self.reads_rows and secagg:
            return f"server_stages: {self.kind} reads each client's update, which secagg hides from the server"
        if privacy.central and self.at == "before_rule":
            return (
                f"server_stages: {self.kind} at before_rule would change the sum before DP's release, whose"
                " sensitivity the accountant assumes; use at: after_release"
            )
        if privacy.central and self.reads_rows:
            return (
                f"server_stages: {self.kind} reads each client's un-noised update, so what the round releases"
                f" would depend on more than privacy.kind={privacy.kind}'s noised sum; not beside central DP"
            )
        if privacy.enabled and self.reads_records:
            return (
                f"server_stages: {self.kind} may read the clients' records (their loss, samples, seconds), which"
                f" privacy.kind={privacy.kind} does not noise; declare reads_records = False on its settings class"
                " if it reads only the released sums and the model"
            )
        return None

    def rule_refusal(self, aggregator: AggregatorConfig, algorithm: AlgorithmBase) -> str | None:
        """Why the stage cannot run beside this run's aggregation rule and algorithm (None: it can), from what
        they declare: a stage that sets the round's update, or takes clients out of the round's sums, needs a rule
        that reads those sums rather than the rows it gathered itself; one that sets the update, an algorithm
        that adds the rows' mean to the model (``adds_mean``) rather than reweighting them."""
        if self.sets_update and not type(algorithm).adds_mean:
            return (
                f"server_stages: {self.kind} sets the round's update from the clients' rows, but"
                f" algorithm.kind={algorithm.kind} does not add their mean to the model (it declares adds_mean"
                " False: it reweights or replaces them), so the model would not take that update"
            )
        if self.sets_update and aggregator.gathers:
            return (
                f"server_stages: {self.kind} sets the round's update from the clients' rows, but"
                f" aggregator.kind={aggregator.kind} combines the rows it gathered itself and would replace it;"
                " use one or the other"
            )
        if not self.removes_clients:
            return None
        removes = f"server_stages: {self.kind} removes clients from the round's sums"
        if not self.reads_rows:
            return f"{removes}, which takes each client's update row: its settings class subclasses RowsStageConfig"
        if self.at != "before_rule":
            return f"{removes}: it runs at before_rule, where the sums are the clients' own, not at {self.at}"
        if aggregator.gathers:
            return (
                f"{removes}, but aggregator.kind={aggregator.kind} combines the rows it gathered itself, which"
                " would still hold them"
            )
        return None  # an algorithm that elects its model (elects_leaders) is refused any row-reading stage already


class RowsStageConfig(ServerStageConfig):
    """A stage that reads each client's update (``view.rows``): the round gathers them as a gathering rule's,
    on the device up to ``memory_mb`` and memory-mapped past it; SecAgg+ hides them, so it is refused beside."""

    reads_rows: ClassVar[bool] = True
    memory_mb: float = Field(256.0, gt=0, le=1e7, description="the gathered rows held in memory; the rest on disk")


SERVER_STAGES = Registry[ServerStageConfig](
    "server_stages",
    ServerStageConfig,
    builtin="fedsim.sim.server_stages",
    default="",
    decorator="register_server_stage",
)
register_server_stage = SERVER_STAGES.register


def parse_server_stages(value: Any) -> list[ServerStageConfig]:
    """Each of your own server steps by the settings class its ``factory`` (or ``kind``) names."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("expected a list of stages, each with factory: package.module:Name")
    for n, item in enumerate(value):
        if isinstance(item, dict) and item.get("kind") is None and item.get("factory") is None:
            raise ValueError(f"server_stages[{n}]: give factory: package.module:Name (or a registered kind)")
    return [SERVER_STAGES.parse(item, "server_stages") for item in value]
