"""A round's numbers by name, as the run store keeps them: the row's columns, then its ``metrics_json``."""

from __future__ import annotations

import json
import math
from dataclasses import fields

from fedsim.runstore import RoundRow

# the row's own number columns, in the run store's order (its id, index and metrics_json are not metrics)
COLUMNS = tuple(f.name for f in fields(RoundRow) if f.name not in ("run_id", "round", "metrics_json"))


def round_metrics(row: RoundRow) -> dict[str, float]:
    """Every finite number round ``row`` recorded: ``train_loss``, ``bytes_up``/``bytes_down`` (bytes),
    ``wall_s``/``train_s`` (seconds), ``samples``, ``clients``; on evaluated rounds ``test_accuracy``,
    ``test_loss`` and the task's own ``test_*``; and what its stages recorded, by the same names as in the run
    store (``epsilon``, ``bytes_up_uncompressed``, ``malicious``, ``backdoor_success``, ``secagg_failed``,
    ``staleness_mean``, ...), a nested mapping's entries as ``name.key``. Lists (each applied update of an
    asynchronous step, say) and text stay in the run store."""
    plain: dict[str, object] = {name: getattr(row, name) for name in COLUMNS}
    for name, value in json.loads(row.metrics_json).items():
        if isinstance(value, dict):
            plain |= {f"{name}.{k}": v for k, v in value.items()}
        else:
            plain[name] = value
    return {
        name: float(value)
        for name, value in plain.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }
