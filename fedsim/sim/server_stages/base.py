"""The server-stage protocol: a step of the server's half of a round, with state a checkpoint keeps.

A stage is built by its registered builder from its settings (:class:`fedsim.config.ServerStageConfig`) and a
:class:`StageContext`. Every rank runs every stage on the same global values, so a stage's state stays in step
without being sent around. Each round the engine calls, in order:

- ``begin_round(r, cohort)`` before the clients train;
- ``apply_(view)`` at the stage's point (``at``) with a :class:`ServerView`: it may rewrite the sums or the
  model in place, and returns True to fail the round (the model stays as it was, as after a SecAgg+ round
  that could not be unmasked; the stages after it are not run);
- ``round_metrics()``: numbers the round's row in the run store keeps (by ``name.metric``).

A stage whose settings subclass :class:`fedsim.config.RowsStageConfig` also reads each client's update:
the round gathers the rows its clients send (as the server decodes them, after the client stages) beside the
sum, all-reduced once so that every rank holds all of them (``view.rows``, :class:`GatheredRows`). One whose
settings also declare ``removes_clients`` takes clients out with ``view.leave_out_(cids)``: their whole part of
every summed segment comes off (:mod:`.contributions`), for any algorithm whose server reads only the sums.

``state_dict()`` (JSON) and ``tensors()`` go into every checkpoint under the stage's name and come back
through ``load_state_dict(state, tensors)`` on resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from fedsim.algorithms.base import ROUND_SEGMENTS
from fedsim.comm.ledger import ByteLedger
from fedsim.config import ConfigError, RowsStageConfig, ServerStageConfig
from fedsim.config.server_stage import SERVER_STAGES, Point
from fedsim.robust.gather import GatheredRows
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.persist.failed import RunFailed, raised
from fedsim.sim.server_stages.contributions import Contributions


@dataclass(frozen=True)
class StageContext:
    """What a stage is built with: the run's seed, its population, the flat model's parameter count and its
    trained parameters' names and shapes, in the flat vector's order (``parameters``: a LoRA factor's name
    ends ``lora_A.<adapter>.weight`` under peft)."""

    seed: int
    population: int
    n_params: int
    parameters: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class ServerView:
    """Round ``round``'s server side as a stage sees it: the global ``sums`` (views of one buffer: writing into
    them changes what the next step reads; ``sums["delta"]`` is the clients' weighted update, ``sums["weight"]``
    the sum of their weights), the global model (``model``: the round's start before the update, the new one
    after it), ``n_params`` (the model's leading parameters; the rest are buffers), every client's record and,
    when a stage reads rows, each client's update (``rows.rows[i]`` is client ``rows.cids[i]``'s delta and
    ``rows.weights[i]`` its coefficient in ``sums["delta"]``; a client that dropped out has no row), and, for a
    stage that declares ``removes_clients``, each client's part of the other summed segments (``contributions``,
    read through :meth:`leave_out_`)."""

    round: int
    sums: Mapping[str, Tensor]
    model: Tensor
    n_params: int
    records: Sequence[ClientRecord]
    rows: GatheredRows | None = None
    contributions: Contributions | None = None

    def leave_out_(self, cids: Iterable[int]) -> None:
        """Take clients ``cids`` out of the round: their weighted update, weight and count, and their part of
        every other segment the algorithm sums (FedNova's ``weight * tau``, SCAFFOLD's control-variate delta,
        DP's clip bit), come off ``sums``, which are then those of a round they never reported in (to float32
        rounding); their ``rows.weights`` become 0. A client taken out already is not taken again; one that did
        not report this round is an error. What they changed on their own side stays theirs (SCAFFOLD's
        ``c_i``: a client updates it as it trains, whatever the server does with its report)."""
        if self.contributions is None or self.rows is None:
            raise ConfigError(
                "view.leave_out_: the stage's settings class declares removes_clients = True (and subclasses"
                " RowsStageConfig), so that the round keeps each client's part of every sum"
            )
        rows, delta = self.rows, self.sums["delta"]
        for cid in cids:
            if cid not in rows.place:
                raise ValueError(f"view.leave_out_: client {cid} did not report in round {self.round + 1}")
            i = rows.place[cid]
            delta.sub_(rows.rows[i].to(delta.device) * rows.weights[i].to(delta.device))
            rows.weights[i] = 0.0
            self.contributions.take_(cid, self.sums)


class ServerStage(Protocol):
    def begin_round(self, r: int, cohort: Sequence[int]) -> None: ...

    def apply_(self, view: ServerView) -> bool:
        """Run the step; True fails the round (the model stays)."""
        ...

    def round_metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def tensors(self) -> dict[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None: ...


class Stateless:
    """A base for a stage that keeps nothing across rounds and reports no metric: subclass it and write
    ``__init__`` and ``apply_`` only (what a checkpoint keeps of it is nothing)."""

    def begin_round(self, r: int, cohort: Sequence[int]) -> None:
        return None

    def round_metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        return None


@dataclass(frozen=True)
class RowSpace:
    """Where a round's gathered rows live: ``numel`` entries each, on ``device``, spilled to ``spill``."""

    numel: int
    device: torch.device
    spill: Path


@dataclass
class PlacedStage:
    """A built stage, its settings, and its name in the plan, the metrics and the checkpoint."""

    name: str
    cfg: ServerStageConfig
    stage: ServerStage


def stage_names(cfgs: Sequence[ServerStageConfig]) -> list[str]:
    """Each stage's name: its kind, ``kind.2`` for a second of the same kind, and so on."""
    names: list[str] = []
    for n, cfg in enumerate(cfgs):
        same = sum(c.kind == cfg.kind for c in cfgs[:n])
        names.append(cfg.kind if same == 0 else f"{cfg.kind}.{same + 1}")
    return names


class ServerStages:
    """The run's stages of its own, by point; what the engine, the checkpoint and the run store ask of them."""

    def __init__(
        self,
        cfgs: Sequence[ServerStageConfig],
        context: StageContext,
        space: RowSpace,
        sums: Mapping[str, int] | None = None,
    ) -> None:
        """``sums``: the algorithm's summed segments by size (beside the round's own: weight, count, clip bits),
        whose clients' parts a stage that removes clients needs."""
        self.placed = [
            PlacedStage(name, cfg, _built(name, cfg, context))
            for name, cfg in zip(stage_names(cfgs), cfgs, strict=True)
        ]
        budgets = [cfg.memory_mb for cfg in cfgs if isinstance(cfg, RowsStageConfig)]
        self.space, self.budget = space, int(max(budgets) * 2**20) if budgets else None  # None: no stage reads rows
        self.rows: GatheredRows | None = None
        self.removes_clients = any(cfg.removes_clients for cfg in cfgs)  # keep each client's part of every sum
        self.segments = {**(sums or {}), **ROUND_SEGMENTS}
        self.contributions: Contributions | None = None

    def begin_round(self, r: int, cohort: Sequence[int], dropped: set[int] | Sequence[int] = ()) -> None:
        for p in self.placed:
            with _own(p, "begin_round", r):
                p.stage.begin_round(r, cohort)
        if self.budget is not None:  # the rows of the clients that report, at their places
            gone, space = set(dropped), self.space
            survivors = [c for c in cohort if c not in gone]
            self.rows = GatheredRows(survivors, space.numel, self.budget, space.spill, space.device)
            if self.removes_clients:
                others = {name: size for name, size in self.segments.items() if name != "delta"}
                spill = space.spill.with_suffix(".parts.f32")
                self.contributions = Contributions(others, survivors, self.budget, spill, space.device)

    @property
    def reads_rows(self) -> bool:
        """Whether a stage reads each client's update, so that the round keeps every row beside the sum."""
        return self.budget is not None

    def gather_(self, cids: Sequence[int], update: Tensor, weights: Tensor) -> None:
        """Keep K clients' update rows (K, numel) and their coefficients (K,), where a stage reads them."""
        if self.rows is not None:
            self.rows.put_(cids, update, weights)

    def keep_(self, cids: Sequence[int], parts: Mapping[str, Tensor]) -> None:
        """Keep K clients' parts of every summed segment but the update ((K, size) by segment), where a stage
        removes clients."""
        if self.contributions is not None:
            self.contributions.keep_(cids, parts)

    def gathered(self, all_reduce: Callable[[Tensor], int], ledger: ByteLedger) -> GatheredRows | None:
        """After the round's all-reduce: every rank's rows (and clients' parts) on every rank (None: no stage
        reads them)."""
        if self.rows is not None:
            ledger.record_moved(self.rows.all_reduce_(all_reduce))
        if self.contributions is not None:
            ledger.record_moved(self.contributions.all_reduce_(all_reduce))
        return self.rows

    def at(self, point: Point, view: ServerView) -> bool:
        """The stages at ``point`` on ``view``, in order, until one fails the round; whether one did. Each sees
        what it declares it reads: the rows only if ``reads_rows``, the clients' records only if
        ``reads_records``."""
        for p in self.placed:
            if p.cfg.at != point:
                continue
            records = view.records if p.cfg.reads_records else ()
            rows = view.rows if p.cfg.reads_rows else None
            parts = self.contributions if p.cfg.removes_clients else None
            with _own(p, "apply_", view.round):
                failed = p.stage.apply_(replace(view, records=records, rows=rows, contributions=parts))
            if failed:
                return True
        return False

    def round_metrics(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for p in self.placed:
            with _own(p, "round_metrics", None):
                metrics |= {f"{p.name}.{k}": float(v) for k, v in p.stage.round_metrics().items()}
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {p.name: p.stage.state_dict() for p in self.placed}

    def tensors(self) -> dict[str, Tensor]:
        return {f"server_stage.{p.name}.{k}": v for p in self.placed for k, v in p.stage.tensors().items()}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        for p in self.placed:
            prefix = f"server_stage.{p.name}."
            own = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
            p.stage.load_state_dict(state.get(p.name, {}), own)


def _built(name: str, cfg: ServerStageConfig, context: StageContext) -> ServerStage:
    """The stage ``cfg`` configures; one ConfigError line naming it if its builder raises, before anything of
    the run is written."""
    try:
        return SERVER_STAGES.build(cfg, context)
    except Exception as exc:  # your own code may fail in any way: say which stage and why, in one line
        where = f" ({cfg.factory})" if cfg.factory else ""
        raise ConfigError(raised(f"server_stages: {name}{where}: building it", exc)) from None


@contextmanager
def _own(p: PlacedStage, call: str, r: int | None) -> Iterator[None]:
    """Run a call into stage ``p`` (your own code); an exception from it fails the run with one line naming the
    stage, the call and the round (counted from 1, as the progress line counts)."""
    try:
        yield
    except Exception as exc:
        when = f" in round {r + 1}" if r is not None else ""
        raise RunFailed(raised(f"server_stages: {p.name}'s {call}{when}", exc)) from exc
