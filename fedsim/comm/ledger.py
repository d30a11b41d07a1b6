"""The byte ledger: what every message would cost on a real network.

The simulation never serialises a model per client, but a deployment would; the ledger charges each client's
download (global model plus any broadcast extras) and upload (everything the algorithm sums) at the wire size
of their dtype, so byte figures mean the same thing in simulation and deployment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLOAT32_BYTES = 4


@dataclass(frozen=True)
class MessageSizes:
    """Bytes of one client's download and upload in one round."""

    down: int
    up: int


@dataclass
class ByteLedger:
    """Running totals in bytes; ``round_*`` are reset by :meth:`close_round`."""

    total_up: int = 0
    total_down: int = 0
    round_up: int = 0
    round_down: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    moved: int = 0  # bytes the simulation itself moved between ranks (collectives, state hand-offs)

    def charge(self, up: int = 0, down: int = 0, kind: str = "model") -> None:
        """Record ``up`` and ``down`` bytes of one message pair under ``kind`` (model, probe, ...)."""
        self.round_up += up
        self.round_down += down
        self.by_kind[kind] = self.by_kind.get(kind, 0) + up + down

    def record_moved(self, nbytes: int) -> None:
        """Count bytes that crossed between simulation ranks; not part of the modelled network traffic."""
        self.moved += nbytes

    def close_round(self) -> tuple[int, int]:
        """Fold this round into the totals; returns the round's (up, down) bytes."""
        up, down = self.round_up, self.round_down
        self.total_up += up
        self.total_down += down
        self.round_up = self.round_down = 0
        return up, down

    def state_dict(self) -> dict[str, int]:
        return {
            "total_up": self.total_up,
            "total_down": self.total_down,
            **{f"kind.{k}": v for k, v in self.by_kind.items()},
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.total_up = int(state["total_up"])
        self.total_down = int(state["total_down"])
        self.moved = int(state.get("moved", 0))
        self.by_kind = {k.removeprefix("kind."): int(v) for k, v in state.items() if k.startswith("kind.")}
