"""pfl-research's side of bench/vs_pfl.py, run by that script in pfl's own virtual environment (never fedsim's):
one workload of bench/pfl_shapes.py trained with pfl's FederatedAveraging on its SimulatedBackend, as pfl's
benchmarks' pytorch/train.py builds it (PyTorchModel with a local SGD optimiser and the shape's central one,
every user weighted alike, no privacy, no evaluation). Prints one JSON line: the seconds of each central
iteration and the whole wall time (from before the data is built to the end of training).

    python bench/pfl_worker.py WORKLOAD ROUNDS [THREADS]       # THREADS: torch's intra-op threads; default torch's
    python -m torch.distributed.run --standalone --nproc-per-node=P bench/pfl_worker.py ...   # P workers
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

started = time.perf_counter()

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pfl_shapes import MODELS, central_optimizer, shape_of, synthetic  # noqa: E402


def main() -> None:
    workload, rounds = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        torch.set_num_threads(int(sys.argv[3]))
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByUser
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel

    shape = shape_of(workload)
    x, y = synthetic(shape)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    windows = {u: shape.user_rows(u) for u in range(shape.users)}
    users = {u: (xt[a:b], yt[a:b]) for u, (a, b) in windows.items()}
    dataset = FederatedDataset.from_slices(users, get_user_sampler("random", range(shape.users)))

    module = MODELS[workload](shape)

    def loss(self: Any, inputs: torch.Tensor, targets: torch.Tensor, eval: bool = False) -> torch.Tensor:
        self.eval() if eval else self.train()
        out = self(inputs)  # (batch, classes) or, for next words, (batch, length, vocabulary)
        return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), targets.long().reshape(-1))

    @torch.no_grad()
    def metrics(self: Any, inputs: torch.Tensor, targets: torch.Tensor, eval: bool = True) -> dict[str, Any]:
        return {}

    module.loss = loss.__get__(module)  # type: ignore[assignment]
    module.metrics = metrics.__get__(module)  # type: ignore[assignment]
    params = [p for p in module.parameters() if p.requires_grad]
    model = PyTorchModel(
        model=module,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=central_optimizer(shape, params),
    )
    backend = SimulatedBackend(training_data=dataset, val_data=None, postprocessors=[WeightByUser()])
    laps: list[float] = []

    class Laps(TrainingProcessCallback):  # type: ignore[misc]
        def on_train_begin(self, *, model: Any) -> Any:
            laps.append(time.perf_counter())
            return Metrics()

        def after_central_iteration(self, aggregate_metrics: Any, model: Any, *, central_iteration: int) -> Any:
            laps.append(time.perf_counter())
            return False, Metrics()

    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=rounds,
            evaluation_frequency=rounds + 1,
            train_cohort_size=shape.cohort,
            val_cohort_size=0,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=shape.local_lr, local_num_epochs=shape.epochs, local_batch_size=shape.batch
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=10_000),
        callbacks=[Laps()],
    )
    round_s = [b - a for a, b in itertools.pairwise(laps)]
    line = {"framework": "pfl", "workload": workload, "threads": torch.get_num_threads(), "round_s": round_s}
    if os.environ.get("RANK", "0") == "0":  # torchrun's first worker speaks for them all
        line["processes"] = int(os.environ.get("WORLD_SIZE", "1"))
        print(json.dumps({**line, "wall_s": time.perf_counter() - started}), flush=True)


if __name__ == "__main__":
    main()
