"""Server steps of your own (``server_stages:``): each one a registered kind, run at a named point of the round.

A stage's settings class subclasses :class:`ServerStageConfig` with ``kind: Literal["..."]`` and its own fields,
and registers its builder with :func:`register_server_stage`; YAML names it with ``factory:`` (the module is
imported, which registers it). ``at`` says where in the server's half of the round it runs:

- ``before_rule``: on the clients' summed updates as the all-reduce (and SecAgg+'s unmasking) left them,
  before the aggregation rule and DP's release;
- ``after_release``: on the sums the server optimiser will read (after the rule and DP's noise);
- ``after_update``: on the new global model, before the downlink broadcasts it.

The plan (``fedsim run --plan``), summary.json's ``stages`` and the checkpoint take every stage from this
list: a stage of your own touches no file of fedsim.
"""

from __future__ import annotations

from typing import Literal

from fedsim.config.registry import Registry, StageConfig

Point = Literal["before_rule", "after_release", "after_update"]
POINTS: tuple[Point, ...] = ("before_rule", "after_release", "after_update")


class ServerStageConfig(StageConfig):
    """Where the stage runs (``at``); its kind's own settings beside it."""

    at: Point = "after_release"


SERVER_STAGES = Registry[ServerStageConfig](
    "server_stages",
    ServerStageConfig,
    builtin="fedsim.sim.server_stages",
    default="",
    decorator="register_server_stage",
)
register_server_stage = SERVER_STAGES.register
