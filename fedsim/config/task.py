"""What a run learns: the task (a loss plus its metrics) and learning-rate schedules over rounds."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, JsonValue, model_validator

from fedsim.config.base import Strict
from fedsim.config.data import ImportPath


class TaskConfig(Strict):
    """``classification``: cross-entropy, top-1 accuracy; ``regression``: mean squared error (the model's output
    has the target's shape, or one more trailing 1); ``language_model``: next-token cross-entropy over every
    position whose target is not ``ignore_index``, reported as perplexity (logits ``(batch, vocab)`` for one
    next token, as LEAF's Shakespeare, or ``(batch, length, vocab)`` against ``(batch, length)`` targets);
    ``python``: your own, ``factory`` (``package.module:function``) called with ``kwargs`` returns a
    :class:`fedsim.tasks.Task` or a loss function ``loss(output, target) -> mean loss``."""

    kind: Literal["classification", "regression", "language_model", "python"] = Field(
        "classification", description="classification, regression, language_model or python (your loss), as above"
    )
    ignore_index: int = Field(-100, description="language_model: targets with this value are padding")
    factory: ImportPath | None = Field(None, description="kind python: package.module:function")
    kwargs: dict[str, JsonValue] = Field(default_factory=dict, description="kind python: the factory's arguments")

    @model_validator(mode="after")
    def _python_factory(self) -> TaskConfig:
        if (self.kind == "python") != (self.factory is not None):
            raise ValueError("task.factory goes with kind python (and kind python needs one)")
        return self


class LrSchedule(Strict):
    """A learning rate's factor over rounds (the rate used in round r is ``lr * factor(r)``).

    ``constant``; ``step``: times ``gamma`` every ``every`` rounds; ``exponential``: times ``gamma`` each round;
    ``cosine``: from 1 down to ``min_factor`` over ``rounds`` rounds, then flat. ``warmup_rounds`` ramp the
    factor linearly up from 1/(warmup_rounds + 1) before the schedule starts counting.
    """

    kind: Literal["constant", "step", "exponential", "cosine"] = Field(
        "constant", description="constant, step, exponential or cosine, as above"
    )
    warmup_rounds: int = Field(
        0, ge=0, description="rounds the factor ramps up linearly from 1/(warmup_rounds + 1) to 1"
    )
    gamma: float = Field(0.1, gt=0, le=1, description="step and exponential: the factor's multiplier")
    every: int = Field(10, ge=1, description="step: rounds between steps")
    rounds: int | None = Field(None, ge=1, description="cosine: rounds to decay over")
    min_factor: float = Field(0.0, ge=0, le=1, description="cosine: the factor it ends at")

    @model_validator(mode="after")
    def _cosine_horizon(self) -> LrSchedule:
        if self.kind == "cosine" and self.rounds is None:
            raise ValueError("a cosine schedule needs rounds (the rounds it decays over)")
        return self

    def factor(self, r: int) -> float:
        """The factor of round ``r`` (0-based)."""
        if r < self.warmup_rounds:
            return (r + 1) / (self.warmup_rounds + 1)
        t = r - self.warmup_rounds
        if self.kind == "step":
            return self.gamma ** (t // self.every)
        if self.kind == "exponential":
            return self.gamma**t
        if self.kind == "cosine":
            progress = min(t / float(self.rounds or 1), 1.0)
            return self.min_factor + (1 - self.min_factor) * 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0
