"""Population traces: the clock's queries on a 5-client trace worked out by hand, a task's duration, the file
round trip and its refusals, the synthetic generator against its stated distributions, FedScale's pickles."""

from __future__ import annotations

import json
import math
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from fedsim.config import ConfigError
from fedsim.traces import SyntheticPopulation, Trace, load, load_fedscale, synthesize

DAY = 86_400.0


def five() -> Trace:
    """0: online [10, 20) and [30, 40) of 100 s; 1: always; 2: never; 3: [90, 100) and [0, 5) of 100 s, one
    stretch across the period's end; 4: [0, 50) of 50 s, always as well."""
    return Trace(
        compute_s=np.array([0.01, 0.02, 0.03, 0.04, 0.05]),
        uplink_bps=np.array([1e6, 2e6, 1e6, 1e6, 8e6]),
        downlink_bps=np.array([4e6, 2e6, 1e6, 1e6, 8e6]),
        period_s=np.array([100.0, 100.0, 100.0, 100.0, 50.0]),
        offsets=np.array([0, 2, 3, 3, 5, 6]),
        starts=np.array([10.0, 30.0, 0.0, 0.0, 90.0, 0.0]),
        ends=np.array([20.0, 40.0, 100.0, 5.0, 100.0, 50.0]),
        meta={"source": "hand"},
    )


def test_online_until_and_next_online_on_five_clients_by_hand() -> None:
    t = five()
    assert [t.online(0, s) for s in (9.99, 10.0, 19.99, 20.0, 35.0, 110.0, 125.0)] == [
        False, True, True, False, True, True, False,
    ]  # fmt: skip
    assert t.online_until(0, 12.0) == 20.0 and t.online_until(0, 231.0) == 240.0
    assert t.online_until(0, 25.0) == 25.0  # offline: now
    assert t.next_online(0, 0.0) == 10.0 and t.next_online(0, 25.0) == 30.0 and t.next_online(0, 45.0) == 110.0
    assert t.next_online(0, 15.0) == 15.0
    assert t.online_until(1, 7.0) == math.inf and t.next_online(1, 7.0) == 7.0
    assert not t.online(2, 50.0) and t.next_online(2, 0.0) == math.inf
    # client 3: [90, 100) runs on into [100, 105)
    assert t.online(3, 95.0) and t.online(3, 102.0) and not t.online(3, 106.0)
    assert t.online_until(3, 95.0) == 105.0 and t.online_until(3, 201.0) == 205.0
    assert t.next_online(3, 5.0) == 90.0 and t.next_online(3, 50.0) == 90.0
    assert t.online_until(4, 1234.5) == math.inf
    assert t.row(7) == 2 and t.online(7, 50.0) is False  # client 7 reads row 7 % 5 = 2


def test_a_tasks_duration_is_compute_plus_both_transfers() -> None:
    t = five()
    # client 0: 0.01 s x 120 samples + 8 x 1e6 bytes / 4e6 b/s + 8 x 5e5 bytes / 1e6 b/s = 1.2 + 2 + 4
    assert t.duration(0, 120, down_bytes=1e6, up_bytes=5e5) == pytest.approx(7.2)
    assert t.duration(9, 10, down_bytes=1e6, up_bytes=1e6) == pytest.approx(0.5 + 1.0 + 1.0)  # row 4


def test_a_trace_file_round_trips_and_its_fingerprint_names_it(tmp_path: Path) -> None:
    t = five()
    t.save(tmp_path / "t.npz")
    back = load(tmp_path / "t.npz")
    assert back.meta == {"source": "hand"} and back.fingerprint() == t.fingerprint()
    assert np.array_equal(back.ends, t.ends) and back.offsets.dtype == np.int64
    other = Trace(**_arrays(meta={"source": "other"}))  # type: ignore[arg-type]
    assert other.fingerprint() != t.fingerprint()


def _arrays(**change: object) -> dict[str, object]:
    t = five()
    names = ("compute_s", "uplink_bps", "downlink_bps", "period_s", "offsets", "starts", "ends")
    return {**{k: getattr(t, k) for k in names}, "meta": {}, **change}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"compute_s": np.array([0.01, -1.0, 0.03, 0.04, 0.05])}, "compute_s of client 1 is -1.0"),
        ({"uplink_bps": np.array([1e6, np.nan, 1e6, 1e6, 1e6])}, "uplink_bps of client 1 is nan"),
        ({"period_s": np.array([100.0, 100.0, 100.0, 100.0])}, "period_s has shape [4], expected [5]"),
        ({"starts": np.array([10.0, 15.0, 0.0, 0.0, 90.0, 0.0])}, "client 0's interval [15.0, 40.0) is not sorted"),
        ({"ends": np.array([20.0, 40.0, 100.0, 5.0, 100.0, 60.0])}, "client 4's interval [0.0, 60.0)"),
        ({"offsets": np.array([0, 2, 1, 3, 5, 6])}, "offsets must be 6 non-decreasing indices from 0"),
        ({"offsets": np.array([0, 0, 0, 0, 0, 0]), "starts": np.zeros(0), "ends": np.zeros(0)}, "no client is ever"),
    ],
)
def test_a_bad_trace_is_one_line_naming_what_is_wrong(change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        Trace(**_arrays(**change))  # type: ignore[arg-type]
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_that_is_not_a_trace_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match=re.escape("junk.npz: cannot read a trace")):
        load(tmp_path / "junk.npz")
    np.savez(tmp_path / "partial.npz", compute_s=np.ones(3))
    with pytest.raises(ConfigError, match=re.escape("partial.npz: not a fedsim trace (missing uplink_bps")):
        load(tmp_path / "partial.npz")
    arrays = {k: v for k, v in _arrays(compute_s=np.array([1.0, 1.0, 1.0, 1.0, 0.0])).items() if k != "meta"}
    np.savez(tmp_path / "zero.npz", **arrays, meta=np.array(json.dumps({})))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=re.escape("zero.npz: trace: compute_s of client 4 is 0.0")):
        load(tmp_path / "zero.npz")
    np.savez(tmp_path / "objects.npz", **arrays, meta=np.array([{"a": 1}], dtype=object))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=re.escape("objects.npz: cannot read a trace")):
        load(tmp_path / "objects.npz")  # no pickled objects are ever loaded


def test_a_fixed_nightly_window_gives_the_intervals_worked_out_by_hand() -> None:
    p = SyntheticPopulation(
        clients=3, utc_spread_h=0.0, window_start_h=22.0, window_start_sd_h=0.0, window_sigma=0.0,
        window_median_h=6.0, daily_chance=1.0,
    )  # fmt: skip
    t = synthesize(p)
    # every day from 22:00 for 6 hours; the seventh night runs past the week's end and wraps to [0, 4 h)
    expected = [(0.0, 4.0)] + [(24.0 * d + 22.0, 24.0 * d + 28.0) for d in range(6)] + [(6 * 24.0 + 22.0, 168.0)]
    for c in range(3):
        lo, hi = t.offsets[c], t.offsets[c + 1]
        got = np.stack([t.starts[lo:hi], t.ends[lo:hi]], axis=1) / 3600
        assert np.allclose(got, np.array(expected))
    assert t.online(0, 23 * 3600.0) and not t.online(0, 12 * 3600.0)
    assert t.online_until(0, 6 * DAY + 23 * 3600.0) == pytest.approx(7 * DAY + 4 * 3600.0)
    assert t.meta["synthetic"] is True and t.meta["window_start_h"] == 22.0 and t.meta["clients"] == 3


def test_synthetic_speeds_rates_and_daily_chance_follow_their_distributions() -> None:
    n = 20_000
    p = SyntheticPopulation(clients=n, seed=3, daily_chance=0.5, utc_spread_h=0.0, window_start_sd_h=0.0,
                            window_sigma=0.0, window_median_h=2.0)  # fmt: skip
    t = synthesize(p)
    # log-normal: the median is the stated median; log values have the stated sigma
    assert np.median(t.compute_s) == pytest.approx(0.005, rel=0.03)
    assert np.log(t.uplink_bps).std() == pytest.approx(0.8, rel=0.03)
    assert np.median(t.downlink_bps) == pytest.approx(20e6, rel=0.03)
    # 2-hour windows at 22:00 never touch each other: one interval per online day, Binomial(7 n, 0.5)
    days_on = len(t.starts)
    assert abs(days_on - 3.5 * n) < 4 * math.sqrt(7 * n * 0.25)
    again = synthesize(p)
    assert again.fingerprint() == t.fingerprint()
    assert synthesize(SyntheticPopulation(clients=n, seed=4)).fingerprint() != t.fingerprint()


def test_fedscale_pickles_load_with_its_units_and_code_in_a_pickle_is_refused(tmp_path: Path) -> None:
    capacity = {2: {"computation": 50.0, "communication": 1000.0}, 1: {"computation": 10.0, "communication": 250.0}}
    behave = {1: {"active": [0, 30], "inactive": [10, 60], "finish_time": 100, "duration": 100, "model": "x"}}
    (tmp_path / "cap").write_bytes(pickle.dumps(capacity))
    (tmp_path / "beh").write_bytes(pickle.dumps(behave))
    t = load_fedscale(tmp_path / "cap", tmp_path / "beh")
    # rows by id: 1 then 2; 3 x 10 ms = 0.03 s a sample; 250 kbit/s = 250,000 bit/s both ways
    assert t.compute_s.tolist() == pytest.approx([0.03, 0.15]) and t.uplink_bps.tolist() == [250e3, 1e6]
    assert t.online(0, 5.0) and not t.online(0, 20.0) and t.online(0, 145.0)
    assert t.online_until(1, 12345.0) == math.inf  # no behaviour entry: online throughout
    assert t.meta["source"] == "fedscale" and t.meta["synthetic"] is False
    (tmp_path / "evil").write_bytes(b"cos\nsystem\n(S'echo owned'\ntR.")
    with pytest.raises(ConfigError, match=re.escape("evil: cannot read FedScale's trace (refusing os.system")):
        load_fedscale(tmp_path / "evil")
    (tmp_path / "odd").write_bytes(pickle.dumps({1: {"active": [0, 5], "inactive": [3], "finish_time": 9}}))
    with pytest.raises(ConfigError, match=re.escape("odd: client 1 has 2 active and 1 inactive times")):
        load_fedscale(tmp_path / "cap", tmp_path / "odd")
