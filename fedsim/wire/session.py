"""Session constants both ends of the split service agree on."""

from __future__ import annotations

SESSION_KEY = "fedsim-session"  # gRPC metadata key carrying the id OpenSession returned


def channel_options(max_message_mb: int) -> list[tuple[str, int]]:
    """The same limits on both ends: what one side may send the other must accept (``max_message_mb`` MiB)."""
    limit = max_message_mb * 2**20
    return [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]
