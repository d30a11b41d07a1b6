"""Each client's task duration on the run's population trace: what Oort's system utility reads, what the trace
clock advances by, and what bench/selection.py's virtual clock adds up."""

from __future__ import annotations

from collections.abc import Callable

from fedsim.algorithms.local_sgd import num_steps
from fedsim.config import AlgorithmConfig
from fedsim.data.base import FederatedDataset
from fedsim.traces import Trace


def task_seconds(
    algorithm: AlgorithmConfig, dataset: FederatedDataset, down_bytes: int, up_bytes: int, trace: Callable[[], Trace]
) -> Callable[[int], float]:
    """``seconds(cid)``: client ``cid``'s task on ``trace()`` (the run's, built at the first call that needs
    it): its local steps' samples at its device's speed, the model down and the update up at its link rates."""

    def seconds(cid: int) -> float:
        n = dataset.n_samples(cid)
        return trace().duration(cid, num_steps(n, algorithm) * min(algorithm.batch_size, n), down_bytes, up_bytes)

    return seconds
