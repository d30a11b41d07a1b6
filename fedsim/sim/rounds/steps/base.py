"""A server step: one file, one class, that says where it runs, what it prints in the plan and what it does.

A step declares its place by the steps it runs ``after`` (and, where that reads better, ``before``); the
round's order is derived from those declarations (:func:`ordered`), never written in the engine. It says its
plan lines from the run's settings alone (:meth:`Step.planned`: none when the run has no such step), is
built from the run's built parts (:meth:`Step.build`: None when the run has none), and acts on one round
(:meth:`Step.apply_`) through a :class:`ServerRound`, which carries the sums, the model, the records and
what the steps before it decided (a failed round, a release, an update). The synchronous round and FedBuff's
server step run the same list; a step that only a synchronous round has is never built for FedBuff (the
settings refuse its section there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from torch import Tensor

from fedsim.comm.ledger import ByteLedger, MessageSizes
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.server_stages import ServerStages, ServerView

if TYPE_CHECKING:  # dp-accounting and the cryptography libraries load only in a run that asks for them
    from fedsim.algorithms.base import Algorithm, RoundContext
    from fedsim.algorithms.fedlgd import FedLgd
    from fedsim.algorithms.server import ServerStep
    from fedsim.comm.downlink import Downlink
    from fedsim.comm.uplink.stage import Uplink
    from fedsim.control.skewscout import Controller, Probe
    from fedsim.privacy.dp import DifferentialPrivacy
    from fedsim.privacy.secagg import SecAggPlus
    from fedsim.robust import Attack, RobustAggregation
    from fedsim.robust.gather import GatheredRows
    from fedsim.sim.executors.base import Executor
    from fedsim.sim.runtime.pool import Pool
    from fedsim.sim.state.state_store import StateStore


class RunParts(Protocol):
    """What a step is built from: the run's built objects (None where the run has no such part)."""

    privacy: DifferentialPrivacy | None
    secagg: SecAggPlus | None
    robust: RobustAggregation | None
    attack: Attack | None
    uplink: Uplink | None
    downlink: Downlink | None
    control: Controller | None
    leaders: FedLgd | None
    server_stages: ServerStages
    server_step: ServerStep
    algorithm: Algorithm
    executor: Executor
    pool: Pool
    store: StateStore
    sizes: MessageSizes
    global_state: Tensor


@dataclass
class ServerRound:
    """One round's server side (FedBuff: one server step) as its steps see it and leave it.

    ``sums`` are this rank's local sums until the all-reduce step makes them global (FedBuff's buffer hands
    global sums: ``summed``); ``records`` likewise become every rank's. ``context`` is the round's start as the
    clients trained from it; ``mine`` the (client, device) pairs this rank trained; ``gathered`` the loop's
    bookkeeping once every rank's records are in (the selector's reports, the devices' seconds and bytes)."""

    index: int  # the 0-based round (FedBuff: its server step)
    context: RoundContext
    sums: Mapping[str, Tensor]
    model: Tensor
    n_params: int
    records: list[ClientRecord]
    all_reduce: Callable[[Tensor], int]
    ledger: ByteLedger
    mine: Sequence[tuple[int, int]] = ()
    summed: bool = False  # the sums are global already
    trained: bool = False  # some client's update is in the sums
    gathered: Callable[[list[ClientRecord]], None] | None = None
    rows: GatheredRows | None = None  # each client's update, where a stage of yours reads them
    failed: bool = False  # a step failed the round: the sums are not read again and the model stays
    released: bool = False  # central DP released the noised sum (the model moves even without a client)
    updated: bool = False  # the server update moved the model
    probe: Probe | None = None  # SkewScout's probe this round
    metrics: dict[str, Any] = field(default_factory=dict)  # the steps' metrics for the round's row

    @property
    def view(self) -> ServerView:
        """What your own stages see (fedsim.sim.server_stages)."""
        return ServerView(self.index, self.sums, self.model, self.n_params, self.records, self.rows)


class Step:
    """A built-in step of the server's half of a round (subclass, set ``name`` and ``after``, register)."""

    name: ClassVar[str]  # its stage in the plan
    after: ClassVar[tuple[str, ...]] = ()  # the steps it runs after, where the run has them
    before: ClassVar[tuple[str, ...]] = ()  # the steps it runs before

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        """Its lines in the plan of a run of ``cfg`` (none: the run has no such step)."""
        return []

    @classmethod
    def build(cls, run: RunParts) -> Step | None:
        """The step for a run of these parts (None: the run has no such step)."""
        raise NotImplementedError

    def apply_(self, at: ServerRound) -> None:
        raise NotImplementedError


_REGISTERED: dict[str, type[Step]] = {}


def register_step(cls: type[Step]) -> type[Step]:
    """Register a built-in server step under its ``name`` (a name registered twice is a mistake, said)."""
    if cls.name in _REGISTERED and _REGISTERED[cls.name] is not cls:
        raise ValueError(f"server step {cls.name!r} is registered twice ({_REGISTERED[cls.name].__name__})")
    _REGISTERED[cls.name] = cls
    return cls


def ordered(steps: Mapping[str, type[Step]] | None = None) -> list[type[Step]]:
    """The steps in the order their declarations give: each after every step it names in ``after`` and
    before every one in ``before``; steps free to go either way keep their names' order. A constraint naming a
    step nobody registered, or a cycle, is an error that names it."""
    steps = dict(_REGISTERED if steps is None else steps)
    edges: dict[str, set[str]] = {name: set() for name in steps}  # name -> the steps that must come first
    for name, cls in steps.items():
        for other in (*cls.after, *cls.before):
            if other not in steps:
                raise ValueError(f"server step {name!r} is ordered against {other!r}, which is not a step")
        edges[name].update(cls.after)
        for later in cls.before:
            edges[later].add(name)
    order: list[type[Step]] = []
    while edges:
        ready = sorted(name for name, first in edges.items() if not first)
        if not ready:
            raise ValueError(f"server steps ordered in a cycle: {', '.join(sorted(edges))}")
        order.append(steps[ready[0]])
        del edges[ready[0]]
        for first in edges.values():
            first.discard(ready[0])
    return order
