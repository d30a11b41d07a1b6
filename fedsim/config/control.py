"""Communication control: a fixed setting, or SkewScout turning one knob to keep the skew-induced loss in a band."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from fedsim.config.base import Strict

# the knobs that set an uplink compressor's parameter; which compressor takes each is what the compressor's
# settings declare (CompressorConfig.knob), never a list of kind names
COMPRESSOR_KNOBS = frozenset({"topk", "rank", "levels"})


class KnobConfig(Strict):
    """The communication knob SkewScout turns: its settings from the tightest (most traffic) to the loosest.

    ``local_steps``: SGD steps per client per round (1 = communicate every step); an increasing ladder of
    whole numbers. ``tau`` (split fine-tuning with several cloud regions): steps between adapter averages,
    likewise. ``topk``: the fraction of each client's update it uploads (top-k with error feedback; the
    rest waits in the client's residual); a decreasing ladder in (0, 1]. ``rank`` (``uplink.kind: powersgd``)
    and ``levels`` (``uplink.kind: qsgd``): the compressor's rank or quantization levels; decreasing whole
    numbers. Default ladders: 1..64 steps, 1.0 down to 0.01 of the entries, ranks 32 down to 1, levels 256 down
    to 1.
    """

    name: Literal["local_steps", "topk", "tau", "rank", "levels"] = Field(
        "local_steps", description="the setting the knob turns, as above"
    )
    ladder: list[float] | None = Field(
        None, description="its rungs from the tightest to the loosest (None: the knob's default ladder)"
    )
    start: int | None = Field(None, ge=0, description="rung to start on; default the loosest")

    @model_validator(mode="after")
    def _ladder(self) -> KnobConfig:
        ladder = self.rungs
        if not ladder:
            raise ValueError("knob.ladder needs at least one setting")
        if self.name in ("local_steps", "tau"):
            if ladder[0] < 1 or any(v != int(v) for v in ladder) or sorted(set(ladder)) != ladder:
                raise ValueError(f"knob.ladder of {self.name} must be increasing whole numbers >= 1, got {ladder}")
        elif self.name in ("rank", "levels"):
            if ladder[-1] < 1 or any(v != int(v) for v in ladder) or sorted(set(ladder), reverse=True) != ladder:
                raise ValueError(f"knob.ladder of {self.name} must be decreasing whole numbers >= 1, got {ladder}")
        elif not all(0 < v <= 1 for v in ladder) or sorted(set(ladder), reverse=True) != ladder:
            raise ValueError(f"knob.ladder of topk must be decreasing fractions in (0, 1], got {ladder}")
        if self.start is not None and self.start >= len(ladder):
            raise ValueError(f"knob.start={self.start} is outside the ladder of {len(ladder)} settings")
        return self

    @property
    def rungs(self) -> list[float]:
        if self.ladder is not None:
            return list(self.ladder)
        if self.name in ("local_steps", "tau"):
            return [1, 2, 4, 8, 16, 32, 64]
        if self.name == "rank":
            return [32, 16, 8, 4, 2, 1]
        if self.name == "levels":
            return [256, 64, 16, 8, 4, 2, 1]
        return [1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01]

    @property
    def start_rung(self) -> int:
        return len(self.rungs) - 1 if self.start is None else self.start


class FixedControl(Strict):
    """``none``: nothing tunes: with a knob, its ``start`` rung for the whole run; without one, the algorithm's
    own setting."""

    kind: Literal["none"] = "none"
    knob: KnobConfig | None = Field(
        None, description="a knob held at its start rung for the whole run; None: the algorithm's own setting"
    )
    budget_steps: int | None = Field(None, ge=1, description="stop once each client took this many SGD steps")

    @property
    def enabled(self) -> bool:
        """Whether a controller runs and retunes the round (a fixed setting does not)."""
        return False


class SkewScoutControl(Strict):
    """Hsieh et al. 2020: estimate the skew-induced accuracy loss by model traveling, keep it in ``target``."""

    kind: Literal["skewscout"]
    target: tuple[float, float] = Field((1.0, 3.0), description="[low, high] accuracy points")
    probe_every: int = Field(5, ge=1, description="rounds between probes")
    pairs: int = Field(4, ge=1, description="(i, j) partition pairs scored per probe")
    sample: int = Field(64, ge=1, description="examples of j's training data each pair is scored on")
    smoothing: float = Field(0.5, gt=0, le=1, description="weight of the newest probe in the estimate")
    knob: KnobConfig = Field(KnobConfig(), description="the communication knob SkewScout turns")
    budget_steps: int | None = Field(None, ge=1, description="stop once each client took this many SGD steps")

    @field_validator("target")
    @classmethod
    def _band(cls, target: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= target[0] < target[1]:
            raise ValueError(f"target [low, high] needs 0 <= low < high, got {list(target)}")
        return target

    @property
    def enabled(self) -> bool:
        return True


def _fixed_unless_named(value: Any) -> Any:
    """``control: {knob: ...}`` without a ``kind`` is a fixed setting, as ``FixedControl``'s default kind says."""
    return {"kind": "none", **value} if isinstance(value, dict) and "kind" not in value else value


ControlConfig = Annotated[
    FixedControl | SkewScoutControl, Field(discriminator="kind"), BeforeValidator(_fixed_unless_named)
]
