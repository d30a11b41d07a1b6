"""What a stage says once on stderr: a paper's formula clamped, an iteration cap hit. Only where the run
announces (rank 0), so several ranks print one line, and each line once a run (its rounds are counted in
summary.json where the stage reports them)."""

from __future__ import annotations

import sys


class Notes:
    def __init__(self, announce: bool = False) -> None:
        self.announce = announce
        self.said: set[str] = set()

    def once(self, key: str, line: str) -> None:
        """Print ``line`` the first time ``key`` is noted, where the run announces."""
        if self.announce and key not in self.said:
            self.said.add(key)
            print(f"fedsim: {line}", file=sys.stderr, flush=True)
