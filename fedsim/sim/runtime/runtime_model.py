"""Per-device runtime model: predicted seconds of a client from its number of samples.

Fitted online by least squares of ``seconds = overhead + per_sample * samples`` over a window of the device's
most recent clients, as Parrot's scheduler does; observations carry the device's (emulated) seconds, so a slow
device is learned as slow.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class RuntimeModel:
    """One linear model per device over its last ``window`` (samples, seconds) observations."""

    def __init__(self, devices: int, window: int = 200, warmup: int = 4) -> None:
        self.devices = devices
        self.warmup = warmup
        self._obs: list[deque[tuple[int, float]]] = [deque(maxlen=window) for _ in range(devices)]
        self._coef: list[tuple[float, float] | None] = [None] * devices

    def observe(self, device: int, samples: int, seconds: float) -> None:
        self._obs[device].append((samples, seconds))
        self._coef[device] = None

    @property
    def warm(self) -> bool:
        """True once every device has ``warmup`` observations; before that the scheduler splits evenly."""
        return all(len(o) >= self.warmup for o in self._obs)

    def predict(self, device: int, samples: int) -> float:
        """Predicted seconds for a client of ``samples`` samples on ``device`` (never negative)."""
        overhead, per_sample = self.coefficients(device)
        return max(overhead + per_sample * samples, 0.0)

    def coefficients(self, device: int) -> tuple[float, float]:
        """(overhead seconds, seconds per sample) of ``device``'s least-squares fit."""
        coef = self._coef[device]
        if coef is None:
            coef = self._fit(device)
            self._coef[device] = coef
        return coef

    def _fit(self, device: int) -> tuple[float, float]:
        obs = np.asarray(self._obs[device], dtype=np.float64)
        if len(obs) == 0:
            return 0.0, 1.0
        x, y = obs[:, 0], obs[:, 1]
        if np.ptp(x) == 0:  # every client the same size: only a rate can be fitted
            return 0.0, float(y.sum() / max(x.sum(), 1.0))
        slope, intercept = np.polyfit(x, y, 1)
        if slope <= 0:  # noise swamped the size effect: fall back to a pure rate
            return 0.0, float(y.sum() / max(x.sum(), 1.0))
        return float(max(intercept, 0.0)), float(slope)

    def state_dict(self) -> dict[str, list[list[tuple[int, float]]]]:
        return {"obs": [list(o) for o in self._obs]}

    def load_state_dict(self, state: dict[str, list[list[tuple[int, float]]]]) -> None:
        for dq, obs in zip(self._obs, state["obs"], strict=True):
            dq.clear()
            dq.extend((int(s), float(t)) for s, t in obs)
        self._coef = [None] * self.devices
