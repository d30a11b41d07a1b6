"""The band policy of SkewScout: keep the estimated accuracy loss inside ``[low, high]`` points.

A knob is a ladder of settings from the tightest (communicate the most) to the loosest. After each probe:
an estimate above ``high`` tightens the knob one rung at once; an estimate below ``low`` on two probes in a
row loosens it one rung (one low reading may be noise; tightening late costs accuracy, loosening late only
bytes); otherwise the knob stays. The knob never leaves its ladder.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """One probe's outcome, as the run store records it."""

    probe: int
    estimate: float
    old: float
    new: float
    action: str  # "tighten" | "loosen" | "hold"


class BandPolicy:
    """``decide(estimate)`` moves along ``ladder`` (tightest first) to keep the estimate in ``[low, high]``."""

    def __init__(self, ladder: list[float], low: float, high: float, start: int | None = None) -> None:
        if not ladder:
            raise ValueError("a knob needs at least one setting")
        if not 0 <= low < high:
            raise ValueError(f"target band [{low}, {high}] must satisfy 0 <= low < high")
        self.ladder, self.low, self.high = list(ladder), low, high
        self.index = len(ladder) - 1 if start is None else start
        if not 0 <= self.index < len(ladder):
            raise ValueError(f"start rung {self.index} outside the ladder of {len(ladder)} settings")
        self.below = 0
        self.probes = 0

    @property
    def value(self) -> float:
        return self.ladder[self.index]

    def decide(self, estimate: float) -> Decision:
        self.probes += 1
        old = self.value
        action = "hold"
        if estimate > self.high:
            self.below = 0
            if self.index > 0:
                self.index -= 1
                action = "tighten"
        elif estimate < self.low:
            self.below += 1
            if self.below >= 2 and self.index < len(self.ladder) - 1:
                self.index += 1
                self.below = 0
                action = "loosen"
        else:
            self.below = 0
        return Decision(self.probes, estimate, old, self.value, action)

    def state_dict(self) -> dict[str, int]:
        return {"index": self.index, "below": self.below, "probes": self.probes}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if not 0 <= state["index"] < len(self.ladder):
            raise ValueError(f"checkpointed rung {state['index']} outside the ladder of {len(self.ladder)}")
        self.index, self.below, self.probes = state["index"], state["below"], state["probes"]
