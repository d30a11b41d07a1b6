"""The one exception a run stopped on purpose (SIGINT, SIGTERM) raises; light, so the CLI can catch it."""

from __future__ import annotations


class RunInterrupted(Exception):
    """A run stopped by SIGINT or SIGTERM, marked ``interrupted`` in the run store; the message names its newest
    checkpoint and how to go on."""
