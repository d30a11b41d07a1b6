"""Simulated adversaries (``attack:``): which clients lie, and how."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fedsim.config.base import Strict

MODEL_POISONING = ("sign_flip", "scale", "gaussian", "alie", "ipm")
OMNISCIENT = ("alie", "ipm")  # computed from the round's honest updates, as the papers assume
DATA_POISONING = ("label_flip", "backdoor")


class AttackConfig(Strict):
    """A ``fraction`` of the population, fixed by the seed, attacks every round it is sampled in.

    Model poisoning replaces a malicious client's update ``x``: ``sign_flip`` sends ``-scale * x``; ``scale``
    sends ``scale * x``; ``gaussian`` sends noise of standard deviation ``std``; ``alie`` ("A little is
    enough", Baruch et al. 2019) sends ``mu - z * sigma`` of the round's honest updates, coordinate-wise, ``z``
    from the paper's formula unless given; ``ipm`` (inner-product manipulation, Xie et al. 2019) sends
    ``-epsilon * mu``. Data poisoning trains on altered data: ``label_flip`` maps label ``y`` to
    ``classes - 1 - y``; ``backdoor`` stamps a ``trigger``-pixel square of the inputs' largest value into the
    bottom-right corner of a ``poison_fraction`` of the client's samples and labels them ``target``, its
    update boosted by ``scale`` (model replacement, Bagdasaryan et al. 2020, when ``scale`` > 1)."""

    kind: Literal["none", "sign_flip", "scale", "gaussian", "alie", "ipm", "label_flip", "backdoor"] = "none"
    fraction: float = Field(0.0, ge=0, lt=1, description="share of the population that is malicious")
    scale: float = Field(1.0, gt=0, le=1e6, description="sign_flip, scale, backdoor: the update's factor")
    std: float = Field(1.0, gt=0, le=1e6, description="gaussian: standard deviation of the sent noise")
    z: float | None = Field(None, gt=0, le=100, description="alie: deviations from the mean; default the paper's")
    epsilon: float = Field(0.1, gt=0, le=1e6, description="ipm: the sent update is -epsilon times the mean")
    target: int = Field(0, ge=0, description="backdoor: the label triggered inputs are given")
    trigger: int = Field(3, ge=1, le=64, description="backdoor: side of the trigger square, in pixels")
    poison_fraction: float = Field(0.5, gt=0, le=1, description="backdoor: share of a client's samples poisoned")

    @model_validator(mode="after")
    def _complete(self) -> AttackConfig:
        if self.kind != "none" and self.fraction == 0:
            raise ValueError(f"attack.kind={self.kind} needs attack.fraction, the share of malicious clients")
        return self

    @property
    def enabled(self) -> bool:
        return self.kind != "none"
