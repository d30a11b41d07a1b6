"""Screening the losses clients report before a selector reads them (``selection.loss_screen``).

Selectors that choose by reported loss (power-of-choice, Oort) hand their seats to clients that say their loss
is high (``attack.reported_loss``; docs/how-to/selection.md measures how many). ``loss_screen: mad`` is
Hampel's outlier identifier (Hampel, JASA 1974) in Iglewicz and Hoaglin's form ("How to Detect and Handle
Outliers", 1993, section 3.3): over one batch of reports (every client's last report, the round's new ones in
place of theirs, as the selector observes a round; or the candidates' probed losses under pow-d and cpow-d, one
batch a round), each finite loss ``x`` has the
modified z-score ``M = 0.6745 (x - median) / MAD``, MAD the median absolute deviation from the median; a
report with ``M > loss_screen_z`` (3.5, their recommendation) is flagged. One-sided: a low report only loses
its client seats, so it is left as said. Where fedsim departs from Hampel's filter, which replaces an outlier by
the window's median: a flagged report is read as the median of the reports of its own batch that were not
flagged (the round's fresh ones), since a client reports its loss after training and the population's last
reports, older, run higher: a liar read at the population's median would still outrank the clients that just
trained (measured: 0.45 of the seats against 0.30 in tests/sim/test_loss_screen.py's setting).

The screen needs an honest majority in each batch: where the liars are more than half of it, the median is a
lie and nothing is screened (a round's few reports alone may be half liars; the population's last reports,
once screened, are not). It catches a liar by the size of its lie: one that reports just under the
threshold keeps an advantage, smaller than an unscreened one's. Where the MAD is 0 (half the batch or more
report the same loss), the score is undefined and nothing is screened.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedsim.config import SelectionConfig
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.selection.base import Selector

CONSISTENCY = 0.6745  # Phi^-1(3/4): MAD / 0.6745 estimates a normal sample's standard deviation


def hampel(losses: np.ndarray, z: float, reference: np.ndarray | None = None) -> np.ndarray:
    """``losses`` with each finite one whose modified z-score, against the median and MAD of ``reference``'s
    finite values (``losses`` themselves by default), exceeds ``z`` replaced by the median of the finite
    ``losses`` kept (the reference's median where none is); non-finite ones (a client without samples: -inf;
    not reported: +inf, NaN) are left and not counted."""
    out = np.array(losses, dtype=np.float64)
    pool = out if reference is None else np.asarray(reference, dtype=np.float64)
    pool = pool[np.isfinite(pool)]
    if len(pool) < 3:  # two reports have no majority to speak for
        return out
    median = float(np.median(pool))
    mad = float(np.median(np.abs(pool - median)))
    if mad == 0.0:
        return out
    finite = np.isfinite(out)
    flagged = np.zeros_like(finite)
    flagged[finite] = CONSISTENCY * (out[finite] - median) / mad > z
    kept = out[finite & ~flagged]
    out[flagged] = float(np.median(kept)) if len(kept) else median
    return out


def screen(cfg: SelectionConfig, losses: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """The batch of losses as the selector ``cfg`` reads them: screened where it asks for a screen."""
    return hampel(losses, cfg.loss_screen_z, reference) if cfg.loss_screen == "mad" else losses


class Screened:
    """A selector that reads the clients' reports through the screen: the candidates' probed losses (pow-d,
    cpow-d) as one batch, and each round's reports against every client's last screened report, so the median
    is the population's, not the few a round trained (where liars may be half). Its memory is checkpointed
    beside the selector's own state."""

    def __init__(self, inner: Selector, cfg: SelectionConfig) -> None:
        self.inner, self.cfg = inner, cfg
        self.last: dict[int, float] = {}  # each client's last report as screened

    def select(self, r: int) -> list[int]:
        return self.inner.select(r)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        batch = {rec.cid: float(rec.loss) for rec in records if math.isfinite(rec.loss)}
        cids = list(batch)
        said = np.array([batch[c] for c in cids], dtype=np.float64)
        others = [loss for cid, loss in self.last.items() if cid not in batch]
        screened = dict(zip(cids, screen(self.cfg, said, np.concatenate([said, others])).tolist(), strict=True))
        self.last |= screened
        self.inner.observe(r, [replace(rec, loss=screened[rec.cid]) if rec.cid in screened else rec for rec in records])

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def tensors(self) -> dict[str, Tensor]:
        cids = sorted(self.last)
        mine = {
            "screen.cids": torch.tensor(cids, dtype=torch.int64),
            "screen.loss": torch.tensor([self.last[c] for c in cids], dtype=torch.float64),
        }
        return self.inner.tensors() | mine

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.inner.load_state_dict(state, {k: v for k, v in tensors.items() if not k.startswith("screen.")})
        if "screen.cids" in tensors:
            self.last = dict(zip(tensors["screen.cids"].tolist(), tensors["screen.loss"].tolist(), strict=True))
