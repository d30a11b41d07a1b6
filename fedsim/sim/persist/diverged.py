"""How a run whose model stopped being finite ends: status ``diverged`` in the run store, one line, exit 3
(:mod:`fedsim.sim.rounds.steps.finite` checks the model each round). Light: the command line imports it."""

from __future__ import annotations


class Diverged(RuntimeError):
    """The model is no longer finite after round ``round`` (0-based)."""

    def __init__(self, round: int, clients: list[int] | None) -> None:
        self.round = round
        self.clients = clients
        if clients is None:
            blamed = "the clients are not named under DP"
        elif clients:
            shown = ", ".join(map(str, clients[:10])) + (f" and {len(clients) - 10} more" if len(clients) > 10 else "")
            blamed = f"training loss not finite at client(s) {shown}"
        else:
            blamed = "every client's training loss was finite: the server's side (its optimiser, a stage) made it so"
        super().__init__(
            f"the model diverged in round {round + 1} (NaN or infinite weights; {blamed}); lower the learning"
            " rate (algorithm.lr, server_optimizer.lr) or clip the updates"
        )

    @classmethod
    def said(cls, message: str) -> Diverged:
        """The error a pool's rank raised, raised again by its parent from the line it left."""
        exc = cls.__new__(cls)
        RuntimeError.__init__(exc, message)
        exc.round, exc.clients = -1, None
        return exc
