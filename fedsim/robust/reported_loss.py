"""What a malicious client says its training loss was (``attack.reported_loss``).

A client reports its mean training loss with its update; selectors that choose by the clients' reports
(power-of-choice, Oort: ``reads_clients``) read it, and the run store keeps it (``client_runs.loss``, the
round's ``train_loss``). A malicious client may say anything:

- ``honest``: the loss it trained to (every attack's default);
- ``high``: :data:`HIGH_FACTOR` times the round's largest finite true training loss, that loss taken as at
  least 1 (``10 * max(1, max_i loss_i)``): always finite and above every honest report of the round, so a
  selector that keeps the highest losses keeps the liars first (Oort's clip at its ``clip_bound`` quantile
  ties them at the top);
- ``low``: 0, the least a loss of the built-in tasks (cross-entropy, squared error) can be: the client says it
  has nothing left to learn;
- your function, ``package.module:function`` or ``path/to/file.py:function``, called as
  ``function(client, honest_loss, round)`` (client id, its true mean training loss, the 0-based round or
  FedBuff's server step) for each malicious client that trained, in client order, on every rank: it must
  return a finite number, the same on every rank for the same arguments.

The attacker here is omniscient, as the simulator's attackers are: ``high`` reads every client's true loss of
the round. The reported value replaces the true one in the client's record once every rank's records are
gathered, so everything after reads what the client said and nothing reads the truth; under DP the clients'
losses, reported or true, stay withheld.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from fedsim.config import ConfigError
from fedsim.config.attack import REPORTED_LOSSES
from fedsim.config.imports import resolve

if TYPE_CHECKING:
    from fedsim.sim.executors.base import ClientRecord

HIGH_FACTOR = 10.0  # high: this many times the round's largest true loss (at least 1)
LOW = 0.0  # low: the least a built-in task's loss can be

Lie = Callable[[int, float, int], float]  # (client, honest loss, round) -> the loss it reports


class ReportedLoss:
    """The loss malicious clients report, as ``setting`` says (a named one, or your function, resolved now so
    that a bad path is refused before the run trains)."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        self.function: Lie | None = None
        if setting not in REPORTED_LOSSES:
            self.function = resolve(setting, "attack.reported_loss")

    def rewrite(self, records: Sequence[ClientRecord], malicious: Collection[int], r: int) -> list[ClientRecord]:
        """The round's gathered ``records`` as the clients report them: each one of a ``malicious`` client with
        its reported loss in place of its true one; round ``r`` is 0-based."""
        if self.setting == "honest" or not any(rec.cid in malicious for rec in records):
            return list(records)
        finite = [rec.loss for rec in records if math.isfinite(rec.loss)]
        high = HIGH_FACTOR * max([1.0, *finite])
        liars = sorted((rec.cid, i) for i, rec in enumerate(records) if rec.cid in malicious)  # in client order
        said = {i: self._said(cid, records[i].loss, r, high) for cid, i in liars}
        return [replace(rec, loss=said[i]) if i in said else rec for i, rec in enumerate(records)]

    def _said(self, cid: int, loss: float, r: int, high: float) -> float:
        if self.setting == "high":
            return high
        if self.setting == "low":
            return LOW
        assert self.function is not None
        called = f"(client, loss, round) = ({cid}, {loss:.4g}, {r})"
        try:
            value = self.function(cid, float(loss), r)
        except Exception as exc:  # your code may fail in any way: say whose and when, in one line
            raise ConfigError(
                f"attack.reported_loss: {self.setting} raised {type(exc).__name__}: {exc} for {called}"
            ) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(
                f"attack.reported_loss: {self.setting} returned {str(value)[:40]} for {called}: a reported loss"
                " is a finite number"
            )
        return float(value)
