"""Each client's task duration on the run's population trace: what Oort's system utility reads, what the
asynchronous clock advances by, and what bench/selection.py's virtual clock adds up."""

from __future__ import annotations

from collections.abc import Callable

from fedsim.algorithms.local_sgd import num_steps
from fedsim.config import RunConfig
from fedsim.data.base import FederatedDataset
from fedsim.traces import Trace, build_trace


def task_seconds(
    cfg: RunConfig, dataset: FederatedDataset, down_bytes: int, up_bytes: int, trace: Trace | None = None
) -> Callable[[int], float]:
    """``seconds(cid)``: client ``cid``'s task on ``trace`` (default the run's, ``asynchronous.trace``, built at
    the first call): its local steps' samples at its device's speed, the model down and the update up at its
    link rates."""
    opt = cfg.algorithm
    built: list[Trace] = [trace] if trace is not None else []

    def seconds(cid: int) -> float:
        if not built:
            built.append(build_trace(cfg.asynchronous.trace, cfg.seed))
        n = dataset.n_samples(cid)
        return built[0].duration(cid, num_steps(n, opt) * min(opt.batch_size, n), down_bytes, up_bytes)

    return seconds
