"""fedsim's client code as a Flower ClientApp, and a ServerApp that runs Flower's own FedAvg over it.

The ClientApp trains with exactly what the simulator runs: the configured dataset and partition, the same
model initialisation, the algorithm's client update (``run_client``) on a :class:`~fedsim.models.Replica` and
the per-(seed, round, client) RNG stream. So a Flower deployment of a fedsim config trains the same clients the
same way, and one round under Flower's Simulation Runtime lands on the same weights as ``fedsim run``
(tests/server).

What maps to what:

- Flower's ``partition-id`` node config is the fedsim client id; Flower's ``server-round`` (from 1) is the
  fedsim round + 1.
- The reply is the client's local model and ``num-examples`` (its sample count, or 1 under
  ``weighting: uniform``), which is what Flower's FedAvg averages. So only model-averaging algorithms whose
  server step is that average map one to one: FedAvg and FedProx with ``server_lr: 1``.
- Flower samples the clients of each round itself; fedsim's cohort sampling and device scheduling do not apply.

    from fedsim.flower import run_flower_simulation
    run_flower_simulation(cfg, out_dir)   # writes out_dir/model.safetensors like fedsim run
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from safetensors.torch import save_file

from fedsim.algorithms import build_algorithm
from fedsim.algorithms.base import Algorithm, ClientContext
from fedsim.algorithms.group import run_client
from fedsim.config import ConfigError, RunConfig
from fedsim.data.base import FederatedDataset
from fedsim.data.build import build_dataset
from fedsim.models import Replica, build_model
from fedsim.sim.cohort import client_generator

MODEL_AVERAGING = ("fedavg", "fedprox")


def check_supported(cfg: RunConfig) -> None:
    """Raise :class:`ConfigError` for configs whose server step is not Flower's FedAvg average."""
    name = cfg.algorithm.name
    if name not in MODEL_AVERAGING:
        raise ConfigError(
            f"algorithm.name={name!r} has no Flower FedAvg equivalent; the Flower app runs {', '.join(MODEL_AVERAGING)}"
        )
    server_lr = getattr(cfg.algorithm, "server_lr", 1.0)
    if server_lr != 1.0:
        raise ConfigError(f"algorithm.server_lr={server_lr} must be 1 to match Flower's FedAvg")


@dataclass
class FlowerWorker:
    """What one Flower worker process needs to train any fedsim client: the data, ONE replica, the algorithm."""

    cfg: RunConfig
    dataset: FederatedDataset
    replica: Replica
    algorithm: Algorithm

    @classmethod
    def build(cls, cfg: RunConfig) -> FlowerWorker:
        torch.set_num_threads(cfg.threads or 1)
        dataset = build_dataset(cfg.data, cfg.seed, cfg.task.kind == "regression")
        module = build_model(cfg.model, dataset.input_shape, dataset.num_classes, cfg.seed)
        return cls(cfg, dataset, Replica(module), build_algorithm(cfg.algorithm, dataset.num_clients))

    def weight(self, cid: int) -> float:
        return self.cfg.algorithm.client_weight(self.dataset.n_samples(cid))

    def train(self, cid: int, round_idx: int, arrays: ArrayRecord) -> RecordDict:
        """One fedsim client update from Flower's global ``arrays``; the reply Flower's FedAvg expects."""
        module = self.replica.module
        module.load_state_dict(arrays.to_torch_state_dict())  # copies into the replica's flat storage
        global_state = self.replica.flat.clone()
        ctx = ClientContext(cid, round_idx, global_state, 1.0, client_generator(self.cfg.seed, round_idx, cid))
        result = run_client(self.algorithm, self.replica, self.dataset.client(cid), None, ctx)
        self.replica.load_(global_state.add_(result.sums["delta"]))  # weight 1: the sum is local - global
        metrics: dict[str, int | float | list[int] | list[float]] = {
            "num-examples": self.weight(cid),
            "train_loss": result.loss.item(),  # one client per Flower call: its loss is read here
            "samples": result.samples,
        }
        return RecordDict({"arrays": ArrayRecord(module.state_dict()), "metrics": MetricRecord(metrics)})


@functools.lru_cache(maxsize=2)
def _worker(cfg_json: str) -> FlowerWorker:
    """One worker per process and config: Flower calls the ClientApp once per client, we build once."""
    return FlowerWorker.build(RunConfig.model_validate_json(cfg_json))


def client_app(cfg: RunConfig) -> ClientApp:
    """A ClientApp whose ``train`` runs fedsim's client update for the node's ``partition-id``."""
    check_supported(cfg)
    cfg_json = cfg.model_dump_json()
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        cid = int(str(context.node_config["partition-id"]))
        round_idx = int(str(msg.content.config_records["config"]["server-round"])) - 1
        reply = _worker(cfg_json).train(cid, round_idx, msg.content.array_records["arrays"])
        return Message(content=reply, reply_to=msg)

    return app


def server_app(cfg: RunConfig, out_dir: Path) -> ServerApp:
    """A ServerApp that runs Flower's FedAvg for ``cfg.rounds`` and writes ``out_dir/model.safetensors``."""
    check_supported(cfg)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        worker = FlowerWorker.build(cfg)
        clients = worker.dataset.num_clients
        strategy = FedAvg(
            fraction_train=cfg.cohort_size / clients,
            fraction_evaluate=0.0,
            min_train_nodes=cfg.cohort_size,
            min_available_nodes=clients,
        )
        module = worker.replica.module
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(module.state_dict()), num_rounds=cfg.rounds)
        module.load_state_dict(result.arrays.to_torch_state_dict())
        out_dir.mkdir(parents=True, exist_ok=True)
        save_file({"global": worker.replica.flat.clone()}, out_dir / "model.safetensors")

    return app


def run_flower_simulation(cfg: RunConfig, out_dir: Path, cpus_per_client: float = 1.0) -> Path:
    """Run ``cfg`` in Flower's Simulation Runtime (Ray backend); returns the path of the final weights."""
    from flwr.simulation import run_simulation

    num_cpus = os.cpu_count() or 1
    run_simulation(
        server_app=server_app(cfg, out_dir),
        client_app=client_app(cfg),
        num_supernodes=cfg.data.clients,
        backend_config={
            "client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
            "init_args": {"num_cpus": num_cpus, "include_dashboard": False, "log_to_driver": False},
        },
    )
    path = out_dir / "model.safetensors"
    if not path.exists():
        raise RuntimeError(f"the Flower simulation ended without writing {path}; see Flower's log above")
    return path
