"""The server's half of a round as registered steps, one file each (:mod:`fedsim.sim.rounds.steps.base`).

Every module of this package is imported here, so a new built-in step is one file that registers itself with
``@register_step``. :func:`server_steps` is the round's order, derived from the steps' declarations; the plan
prints it and both the synchronous round and FedBuff's server step run it.
"""

from __future__ import annotations

import importlib
import pkgutil

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, ordered, register_step

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def server_steps() -> list[type[Step]]:
    """Every registered server step, in the round's order."""
    return ordered()


def build_steps(run: RunParts) -> list[Step]:
    """The steps a run of ``run``'s parts has, in the round's order."""
    return [step for cls in server_steps() if (step := cls.build(run)) is not None]


def planned_server(cfg: PlanSettings) -> list[PlannedStage]:
    """The server steps' lines in the plan of a run of ``cfg``, in the round's order."""
    return [line for cls in server_steps() for line in cls.planned(cfg)]


__all__ = ["RunParts", "ServerRound", "Step", "build_steps", "planned_server", "register_step", "server_steps"]
