"""SkewScout's estimate of the skew-induced accuracy loss from model traveling.

Each probe picks ``pairs`` ordered pairs (i, j), i != j, with a seeded RNG. Partition i's model is scored on a
small sample of j's training data and compared with j's own model on the same sample; the gap (in accuracy
points, j's own minus the traveller's) is how much worse a model does on data skewed away from its own. A
probe's reading is the median of its gaps (robust to one odd pair); the estimate smooths readings with an
exponential moving average so one noisy probe does not swing the knob.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# scorer(model_of, data_of) -> accuracy in [0, 1] of partition ``model_of``'s model on a sample of ``data_of``
Scorer = Callable[[int, int], float]


class TravelEstimator:
    def __init__(self, partitions: int, pairs: int, smoothing: float, seed: int) -> None:
        if partitions < 2:
            raise ValueError("model traveling needs at least 2 partitions")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.partitions, self.pairs, self.smoothing = partitions, pairs, smoothing
        self.rng = np.random.default_rng([seed, 0x5C047])
        self.estimate: float | None = None

    def sample_pairs(self) -> list[tuple[int, int]]:
        """``pairs`` distinct ordered pairs (i, j), i != j (all of them when fewer exist)."""
        n = self.partitions
        total = n * (n - 1)
        picks = self.rng.choice(total, size=min(self.pairs, total), replace=False)
        out = []
        for p in picks.tolist():
            i, r = divmod(p, n - 1)
            out.append((i, r + (r >= i)))
        return out

    def probe(
        self, score: Scorer, pairs: list[tuple[int, int]] | None = None
    ) -> tuple[float, list[tuple[int, int, float]]]:
        """One probe over ``pairs`` (default: freshly sampled): ``(smoothed estimate, [(i, j, gap points)])``."""
        gaps = []
        own: dict[int, float] = {}
        for i, j in self.sample_pairs() if pairs is None else pairs:
            if j not in own:
                own[j] = score(j, j)
            gaps.append((i, j, 100.0 * (own[j] - score(i, j))))
        reading = float(np.median([g for _, _, g in gaps]))
        if self.estimate is None:
            self.estimate = reading
        else:
            self.estimate = self.smoothing * reading + (1 - self.smoothing) * self.estimate
        return self.estimate, gaps

    def state_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        estimate = state["estimate"]
        self.estimate = None if estimate is None else float(estimate)
        self.rng.bit_generator.state = state["rng"]
