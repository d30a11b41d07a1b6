"""A synthetic population: log-normal device speeds and link rates, diurnal availability windows.

Cross-device clients train when they are idle, charging and on an unmetered network: in most studies of
production populations that is a window at night, local time (Bonawitz et al., MLSys 2019; Yang et al.,
WWW 2021, whose 136k-user week FedScale ships). Each client here lives in a time zone drawn uniformly from
``utc_spread_h`` hours; on each day of the ``days``-day period it is online, with chance ``daily_chance``, from
a local start drawn around ``window_start_h`` (normal, ``window_start_sd_h``) for a log-normal length of median
``window_median_h`` (``window_sigma``); ``always_online`` of the clients are online throughout. Speeds and
rates are log-normal around their medians (FedScale's lognormal device model draws seconds per sample with
tail 0.6). Every number is recorded in the trace's meta with ``synthetic: true``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from fedsim.traces.format import Trace

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True)
class SyntheticPopulation:
    clients: int
    seed: int = 0
    compute_s_median: float = 0.005
    compute_sigma: float = 0.6
    uplink_bps_median: float = 5e6
    uplink_sigma: float = 0.8
    downlink_bps_median: float = 20e6
    downlink_sigma: float = 0.8
    days: int = 7
    utc_spread_h: float = 24.0
    window_start_h: float = 22.0
    window_start_sd_h: float = 2.0
    window_median_h: float = 6.0
    window_sigma: float = 0.5
    daily_chance: float = 0.8
    always_online: float = 0.0


def synthesize(p: SyntheticPopulation) -> Trace:
    """The population ``p`` describes, the same for the same parameters."""
    rng = np.random.default_rng(p.seed)
    n = p.clients
    compute = p.compute_s_median * np.exp(p.compute_sigma * rng.standard_normal(n))
    up = p.uplink_bps_median * np.exp(p.uplink_sigma * rng.standard_normal(n))
    down = p.downlink_bps_median * np.exp(p.downlink_sigma * rng.standard_normal(n))
    period = p.days * DAY
    zone = rng.uniform(0.0, p.utc_spread_h, size=n) * HOUR
    start = (p.window_start_h + p.window_start_sd_h * rng.standard_normal((n, p.days))) * HOUR
    length = np.minimum(p.window_median_h * np.exp(p.window_sigma * rng.standard_normal((n, p.days))), 24.0) * HOUR
    on = rng.random((n, p.days)) < p.daily_chance
    always = rng.random(n) < p.always_online
    begin = (np.arange(p.days) * DAY)[None, :] + start - zone[:, None]
    offsets = np.zeros(n + 1, dtype=np.int64)
    starts: list[float] = []
    ends: list[float] = []
    for i in range(n):
        pieces = [(0.0, period)] if always[i] else _wrap(begin[i][on[i]], length[i][on[i]], period)
        for lo, hi in pieces:
            starts.append(lo)
            ends.append(hi)
        offsets[i + 1] = len(starts)
    meta = {"source": "synthetic", "synthetic": True, "generator": "fedsim.traces.synthetic", **asdict(p)}
    return Trace(
        compute_s=compute,
        uplink_bps=up,
        downlink_bps=down,
        period_s=np.full(n, period),
        offsets=offsets,
        starts=np.asarray(starts, dtype=np.float64),
        ends=np.asarray(ends, dtype=np.float64),
        meta=meta,
    )


def _wrap(begin: np.ndarray, length: np.ndarray, period: float) -> list[tuple[float, float]]:
    """Windows ``[begin, begin + length)`` folded into ``[0, period)`` (split where they cross its end), sorted,
    overlapping ones merged."""
    pieces: list[tuple[float, float]] = []
    for b, w in zip(begin.tolist(), length.tolist(), strict=True):
        lo = b % period
        hi = lo + w
        if hi <= period:
            pieces.append((lo, hi))
        else:
            pieces += [(lo, period), (0.0, hi - period)]
    pieces.sort()
    merged: list[tuple[float, float]] = []
    for lo, hi in pieces:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
