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
  return a finite number, the same on every rank for the same arguments. Where it raises or returns anything
  else the run fails there (:class:`fedsim.config.base.RunFailed`: marked failed, exit 1 on the command line),
  in one line that names the function and its arguments.

The attacker here is omniscient, as the simulator's attackers are: ``high`` reads every client's true loss of
the round. The reported value replaces the true one in the client's record once every rank's records are
gathered, so everything after reads what the client said and nothing reads the truth; under DP the clients'
losses, reported or true, stay withheld.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

from fedsim.config.attack import REPORTED_LOSSES
from fedsim.config.base import RunFailed
from fedsim.config.imports import resolve

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

    def rewrite(self, cids: Sequence[int], losses: Sequence[float], malicious: Collection[int], r: int) -> list[float]:
        """The round's gathered reports as the clients make them: ``losses[i]`` is client ``cids[i]``'s true
        loss; each ``malicious`` client's becomes its reported one, the others' stay. Round ``r`` is 0-based."""
        liars = sorted((cid, i) for i, cid in enumerate(cids) if cid in malicious)  # your function: in client order
        if self.setting == "honest" or not liars:
            return list(losses)
        high = HIGH_FACTOR * max([1.0, *(loss for loss in losses if math.isfinite(loss))])
        said = list(losses)
        for cid, i in liars:
            said[i] = self._said(cid, losses[i], r, high)
        return said

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
            said = f"attack.reported_loss: {self.setting} raised {type(exc).__name__}: {exc} for {called}"
            raise RunFailed(said) from exc
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RunFailed(
                f"attack.reported_loss: {self.setting} returned {str(value)[:40]} for {called}: a reported loss"
                " is a finite number"
            )
        return float(value)
