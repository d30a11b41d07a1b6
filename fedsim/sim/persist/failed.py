"""A run that started on good input and failed: marked ``failed`` in the run store, said in one line.

The command line prints the line and exits 1, as for a full disk (the input was good; the run, or code of your
own that it ran, failed it); exit 2 stays for input refused before anything is written. From Python the error is
a RuntimeError whose ``__cause__`` is the exception that failed the run, with its traceback.
"""

from __future__ import annotations

from fedsim.config.base import RunFailed

__all__ = ["RunFailed", "raised"]


def raised(what: str, exc: BaseException) -> str:
    """``what`` (``server_stages: reputation's apply_ in round 3``) raised ``exc``, in one line however many
    lines the exception's own message has."""
    said = " ".join(str(exc).split())
    return f"{what} raised {type(exc).__name__}" + (f": {said}" if said else "")
