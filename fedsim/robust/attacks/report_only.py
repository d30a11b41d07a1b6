"""Clients that send honest updates and lie only about their training loss (``kind: report_only``): what a
selector that chooses by the clients' reports (power-of-choice, Oort) is exposed to, apart from any poisoning.
Its settings need ``reported_loss`` other than ``honest`` (:mod:`fedsim.robust.reported_loss`)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.robust.attack import AttackContext, ModelPoisoning


class ReportOnlyConfig(AttackConfig):
    kind: Literal["report_only"] = "report_only"

    @model_validator(mode="after")
    def _lies(self) -> ReportOnlyConfig:
        if not self.lies_about_loss:
            raise ValueError(
                "kind=report_only sends honest updates: with reported_loss=honest it is a clean run; set"
                " attack.reported_loss (high, low, or your function)"
            )
        return self


@register_attack(ReportOnlyConfig)
def report_only(cfg: ReportOnlyConfig, context: AttackContext) -> ModelPoisoning:
    return ModelPoisoning(cfg, context)  # its updates go as trained: the lie is in its loss alone
