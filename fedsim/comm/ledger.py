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
    """Bytes of one client's download and upload in one round, and of the model itself, all at float32.

    ``delta`` is the part of the upload a compressor may shrink (the model delta); ``model`` is what a
    traveling model costs one way (SkewScout's probes).
    """

    down: int
    up: int
    delta: int
    model: int

    @classmethod
    def of(cls, sums: dict[str, int], broadcast: int, model_numel: int) -> MessageSizes:
        """From the uploaded segments (values per name, the client's weight included), the values broadcast
        per client (model included) and the model's value count."""
        up = sum(sums.values())
        return cls(
            down=broadcast * FLOAT32_BYTES,
            up=up * FLOAT32_BYTES,
            delta=sums.get("delta", 0) * FLOAT32_BYTES,
            model=model_numel * FLOAT32_BYTES,
        )

    @property
    def dense(self) -> int:
        """One client's download plus upload, uncompressed."""
        return self.down + self.up


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

    def charge_client(self, sizes: MessageSizes, sparse_delta: int | None = None, model: int | None = None) -> None:
        """One client's messages; ``sparse_delta`` bytes, when its delta went compressed, replace the dense delta,
        and ``model`` bytes, when the broadcast model went compressed, the dense model."""
        up = sizes.up if sparse_delta is None else sizes.up - sizes.delta + sparse_delta
        down = sizes.down if model is None else sizes.down - sizes.model + model
        self.charge(up=up, down=down)

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
            "moved": self.moved,  # a resumed run's bytes_moved goes on from the checkpoint's
            **{f"kind.{k}": v for k, v in self.by_kind.items()},
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.total_up = int(state["total_up"])
        self.total_down = int(state["total_down"])
        self.moved = int(state.get("moved", 0))
        self.by_kind = {k.removeprefix("kind."): int(v) for k, v in state.items() if k.startswith("kind.")}
