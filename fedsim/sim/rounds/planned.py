"""What a round's plan is made of: the sections of a run's config it reads (:class:`PlanSettings`) and its
lines (:class:`PlannedStage`), shared by the plan (:mod:`fedsim.sim.rounds.plan`) and the server's steps, each
of which says its own lines (:mod:`fedsim.sim.rounds.steps`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from fedsim.config import (
    AggregatorConfig,
    AlgorithmBase,
    AttackConfig,
    CompressorConfig,
    ControlConfig,
    CoresetConfig,
    ExecutorConfig,
    PrivacyConfig,
    SecAggConfig,
    SelectionConfig,
    ServerOptimizerConfig,
    ServerStageConfig,
    TopologyConfig,
)


class PlanSettings(Protocol):
    """What of a run's config the plan reads: the section of each stage a round can run."""

    @property
    def algorithm(self) -> AlgorithmBase: ...

    @property
    def decentralised(self) -> bool: ...

    @property
    def topology(self) -> TopologyConfig: ...

    @property
    def executor(self) -> ExecutorConfig: ...

    @property
    def coreset(self) -> CoresetConfig: ...

    @property
    def attack(self) -> AttackConfig: ...

    @property
    def privacy(self) -> PrivacyConfig: ...

    @property
    def uplink(self) -> CompressorConfig: ...

    @property
    def downlink(self) -> CompressorConfig: ...

    @property
    def aggregator(self) -> AggregatorConfig: ...

    @property
    def secagg(self) -> SecAggConfig: ...

    @property
    def selection(self) -> SelectionConfig: ...

    @property
    def cohort_size(self) -> int: ...

    @property
    def devices(self) -> int: ...

    @property
    def server_stages(self) -> Sequence[ServerStageConfig]: ...

    @property
    def server_optimizer(self) -> ServerOptimizerConfig: ...

    @property
    def control(self) -> ControlConfig: ...


@dataclass(frozen=True)
class PlannedStage:
    stage: str
    side: Literal["client", "server"]
    kind: str
    settings: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "side": self.side, **self.settings, "kind": self.kind}


def without_kind(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k != "kind"}


def private(cfg: PlanSettings, *fields: str) -> dict[str, Any]:
    """The privacy section's ``fields`` that are set."""
    return {f: getattr(cfg.privacy, f) for f in fields if getattr(cfg.privacy, f) is not None}
