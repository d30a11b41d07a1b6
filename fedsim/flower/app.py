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
  server step is that average map one to one: FedAvg and FedProx with the plain server step (sgd, lr 1).
- Each round trains fedsim's cohort (its sampling, availability and dropout): :class:`FedsimCohort` sends the
  cohort with the round's config and, once the nodes' partition ids are known (after round 1), only to them; a
  node outside the cohort replies with weight 0. So partial cohorts land on fedsim's weights too. Device
  scheduling does not apply.

    from fedsim.flower import run_flower_simulation
    run_flower_simulation(cfg, out_dir)   # model.safetensors, summary.json and a run-store row like fedsim run
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from safetensors.torch import load_file, save_file

from fedsim.algorithms import build_algorithm
from fedsim.algorithms.base import Algorithm, ClientContext, ClientResult
from fedsim.algorithms.group import run_client
from fedsim.config import ConfigError, load_config, local_training, parse_config
from fedsim.data.base import FederatedDataset
from fedsim.data.build import build_dataset
from fedsim.models import Replica, build_model
from fedsim.runstore import RoundRow, RunStore
from fedsim.sim.rounds.cohort import client_generator, dropped_clients, sample_cohort
from fedsim.sim.rounds.summary import Summary, peak_rss_mb
from fedsim.sim.run.settings import EngineSettings
from fedsim.tasks import build_task
from fedsim.tasks.evaluate import evaluate

MODEL_AVERAGING = ("fedavg", "fedprox")


class FlowerSettings(EngineSettings, Protocol):
    """What the Flower apps read: a federated run's sections (a :class:`~fedsim.config.RunConfig` satisfies it),
    and the whole config as JSON, which each of Flower's worker processes is sent to build its client."""

    def model_dump_json(self) -> str: ...


def check_supported(cfg: FlowerSettings) -> None:
    """Raise :class:`ConfigError` for configs whose server step is not Flower's FedAvg average."""
    name = cfg.algorithm.kind
    if name not in MODEL_AVERAGING:
        raise ConfigError(
            f"algorithm.kind={name!r} has no Flower FedAvg equivalent; the Flower app runs {', '.join(MODEL_AVERAGING)}"
        )
    if not cfg.server_optimizer.adds_mean:
        opt = cfg.server_optimizer
        raise ConfigError(
            f"server_optimizer.kind={opt.kind} (lr={opt.lr:g}): Flower's FedAvg adds the clients' mean as it is;"
            " use server_optimizer.kind=sgd with lr 1"
        )
    # the Flower apps send dense updates and average them, every client honest, the cohort a uniform sample; read
    # off what each section declares, never its kind's name
    simulated = {
        "uplink": cfg.uplink.enabled,
        "downlink": cfg.downlink.enabled,
        "coreset": cfg.coreset.enabled,
        "attack": cfg.attack.enabled,
        "aggregator": cfg.aggregator.enabled,
        "selection": not cfg.selection.samples_uniformly,
        "control": cfg.control.enabled,
    }
    for section, used in simulated.items():
        if used:
            kind = getattr(cfg, section).kind
            raise ConfigError(f"{section}.kind={kind} runs in fedsim's simulation only, not under the Flower apps")
    if cfg.server_stages:
        raise ConfigError("server_stages run in fedsim's simulation only, not under the Flower apps")
    if cfg.model.adapter.enabled:  # they send the module's whole state_dict: the frozen base every round
        raise ConfigError(
            f"model.adapter.kind={cfg.model.adapter.kind}: the Flower apps send the model's whole state, the frozen"
            " base included; run adapters in fedsim's simulation"
        )
    if cfg.privacy.enabled:  # they would train plain FedAvg and report no epsilon: refused, not silently public
        raise ConfigError(
            f"privacy.kind={cfg.privacy.kind}: the Flower apps do not clip, noise or account;"
            " run privacy.* in fedsim's simulation"
        )


def check_plain(cfg: FlowerSettings) -> None:
    """:func:`check_supported`, and no ``secagg`` (the plain apps sum in the clear; the SecAgg+ apps mask)."""
    check_supported(cfg)
    if cfg.secagg.enabled:
        raise ConfigError(
            "secagg.kind=secagg_plus: the plain Flower apps sum in the clear; use fedsim.flower.secagg's apps"
        )


@dataclass
class FlowerWorker:
    """What one Flower worker process needs to train any fedsim client: the data, ONE replica, the algorithm."""

    cfg: FlowerSettings
    dataset: FederatedDataset
    replica: Replica
    algorithm: Algorithm

    @classmethod
    def build(cls, cfg: FlowerSettings) -> FlowerWorker:
        torch.set_num_threads(cfg.threads or 1)
        dataset = build_dataset(cfg.data, cfg.seed, cfg.task.kind == "regression")
        module = build_model(cfg.model, dataset.input_shape, dataset.num_classes, cfg.seed)
        return cls(cfg, dataset, Replica(module), build_algorithm(cfg.algorithm, dataset.num_clients))

    def weight(self, cid: int) -> float:
        return local_training(self.cfg.algorithm).client_weight(self.dataset.n_samples(cid))

    def update(self, cid: int, round_idx: int, state: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ClientResult]:
        """Client ``cid``'s update in round ``round_idx`` from the global model's ``state`` (a state dict): the
        global flat model and the client's result, its update (local - global, weight 1) in ``sums["delta"]``."""
        self.replica.module.load_state_dict(state)  # copies into the replica's flat storage
        global_state = self.replica.flat.clone()
        ctx = ClientContext(cid, round_idx, global_state, 1.0, client_generator(self.cfg.seed, round_idx, cid))
        return global_state, run_client(self.algorithm, self.replica, self.dataset.client(cid), None, ctx)

    def train(self, cid: int, round_idx: int, arrays: ArrayRecord, cohort: list[int] | None = None) -> RecordDict:
        """One fedsim client update from Flower's global ``arrays``; the reply Flower's FedAvg expects. A client
        outside ``cohort`` trains nothing and replies with weight 0."""
        if cohort is not None and cid not in cohort:
            idle: dict[str, int | float | list[int] | list[float]] = {
                "num-examples": 0,
                "train_loss": 0.0,  # weight 0: counts for nothing in the average
                "samples": 0,
                "partition-id": cid,
            }
            return RecordDict({"arrays": arrays, "metrics": MetricRecord(idle)})
        global_state, result = self.update(cid, round_idx, arrays.to_torch_state_dict())
        self.replica.load_(global_state.add_(result.sums["delta"]))  # weight 1: the sum is local - global
        module = self.replica.module
        metrics: dict[str, int | float | list[int] | list[float]] = {
            "num-examples": self.weight(cid),
            "train_loss": result.loss.item(),  # one client per Flower call: its loss is read here
            "samples": result.samples,
            "partition-id": cid,  # the server learns which node is which client
        }
        return RecordDict({"arrays": ArrayRecord(module.state_dict()), "metrics": MetricRecord(metrics)})


@functools.lru_cache(maxsize=2)
def worker_for(cfg_json: str) -> FlowerWorker:
    """One worker per process and config: Flower calls the ClientApp once per client, we build once."""
    return FlowerWorker.build(parse_config(json.loads(cfg_json)))


def client_app(cfg: FlowerSettings) -> ClientApp:
    """A ClientApp whose ``train`` runs fedsim's client update for the node's ``partition-id``."""
    check_plain(cfg)
    cfg_json = cfg.model_dump_json()
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        cid = int(str(context.node_config["partition-id"]))
        config = msg.content.config_records["config"]
        round_idx = int(str(config["server-round"])) - 1
        cohort = [int(c) for c in config["fedsim-cohort"]] if "fedsim-cohort" in config else None  # type: ignore[union-attr]
        reply = worker_for(cfg_json).train(cid, round_idx, msg.content.array_records["arrays"], cohort)
        return Message(content=reply, reply_to=msg)

    return app


def trained(cfg: FlowerSettings, population: int, round_idx: int) -> list[int]:
    """The clients fedsim trains in ``round_idx``: its cohort less those that drop out."""
    drawn = sample_cohort(cfg.seed, round_idx, population, cfg.cohort_size, cfg.emulation.availability)
    dropped = dropped_clients(cfg.seed, round_idx, drawn, cfg.emulation.dropout)
    return [cid for cid in drawn if cid not in dropped]


class FedsimCohort(FedAvg):
    """Flower's FedAvg on fedsim's cohort of each round: the same clients fedsim trains, so the same average."""

    def __init__(self, cfg: FlowerSettings, clients: int) -> None:
        super().__init__(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=1, min_available_nodes=clients)
        self.cfg, self.clients = cfg, clients
        self.partition_of: dict[int, int] = {}  # node id -> fedsim client id, from the replies

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        cohort = trained(self.cfg, self.clients, server_round - 1)
        config["server-round"] = server_round
        config["fedsim-cohort"] = cohort
        nodes = list(grid.get_node_ids())
        if len(self.partition_of) == len(nodes):  # every node's client known: send to the cohort only
            nodes = [n for n in nodes if self.partition_of[n] in set(cohort)]
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(record, nodes, MessageType.TRAIN)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        weights = 0.0
        for reply in replies:
            if reply.has_content():
                metrics = reply.content.metric_records["metrics"]
                self.partition_of[reply.metadata.src_node_id] = int(metrics["partition-id"])  # type: ignore[arg-type]
                weights += float(metrics["num-examples"])  # type: ignore[arg-type]
        if weights == 0:  # every client of the round dropped out: the model stays, as in fedsim
            return None, None
        return super().aggregate_train(server_round, replies)


def server_app(cfg: FlowerSettings, out_dir: Path, history: dict[int, dict[str, float]] | None = None) -> ServerApp:
    """A ServerApp that runs Flower's FedAvg on fedsim's cohorts for ``cfg.rounds`` and writes
    ``out_dir/model.safetensors``; ``history`` gets each round's aggregated train metrics."""
    check_plain(cfg)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        worker = FlowerWorker.build(cfg)
        strategy = FedsimCohort(cfg, worker.dataset.num_clients)
        module = worker.replica.module
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(module.state_dict()), num_rounds=cfg.rounds)
        module.load_state_dict(result.arrays.to_torch_state_dict())
        out_dir.mkdir(parents=True, exist_ok=True)
        save_file({"global": worker.replica.flat.clone()}, out_dir / "model.safetensors")
        if history is not None:
            for r, metrics in result.train_metrics_clientapp.items():
                history[r] = {k: float(v) for k, v in metrics.items()}  # type: ignore[arg-type]

    return app


def run_flower_simulation(
    cfg: FlowerSettings | Mapping[str, Any] | str | Path,
    out_dir: Path,
    cpus_per_client: float = 1.0,
    db: Path | None = Path("runs/fedsim.db"),
) -> Path:
    """Run ``cfg`` (a RunConfig, a config mapping or a YAML path) in Flower's Simulation Runtime (Ray backend);
    returns the path of the final weights. Like ``fedsim run`` it writes ``out_dir/summary.json`` (the final
    model's test metrics, ``executor: flower``) and a run in the run store ``db`` with a row per round."""
    from flwr.simulation import run_simulation

    if isinstance(cfg, Mapping):
        cfg = parse_config(dict(cfg))
    elif isinstance(cfg, str | Path):
        cfg = load_config(cfg)
    check_plain(cfg)
    store = RunStore(db) if db is not None else None
    run_id = store.start_run(cfg.name, "simulation", cfg.model_dump(mode="json"), cfg.rounds) if store else ""
    history: dict[int, dict[str, float]] = {}
    started = time.perf_counter()
    try:
        run_simulation(
            server_app=server_app(cfg, out_dir, history),
            client_app=client_app(cfg),
            num_supernodes=cfg.data.clients,
            backend_config={
                "client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
                "init_args": {"num_cpus": os.cpu_count() or 1, "include_dashboard": False, "log_to_driver": False},
            },
        )
        path = out_dir / "model.safetensors"
        if not path.exists():
            raise RuntimeError(f"the Flower simulation ended without writing {path}; see Flower's log above")
        summary = _record(cfg, load_file(path)["global"], history, run_id, time.perf_counter() - started, store)
    except BaseException:
        if store is not None:
            store.finish_run(run_id, "failed", None)
            store.close()
        raise
    fields = summary.as_dict(skewscout=False)
    (out_dir / "summary.json").write_text(json.dumps(fields, indent=2, allow_nan=False) + "\n")
    if store is not None:
        store.finish_run(run_id, "finished", fields)
        store.close()
    return path


def _record(
    cfg: FlowerSettings,
    weights: torch.Tensor,
    history: dict[int, dict[str, float]],
    run_id: str,
    wall_s: float,
    store: RunStore | None,
) -> Summary:
    """The final model scored on the test set, a run-store row per round, and the run's summary."""
    worker = FlowerWorker.build(cfg)
    result = evaluate(worker.replica, weights, worker.dataset.test, cfg.eval_batch_size, build_task(cfg.task))
    sent = weights.numel() * weights.element_size()  # float32 arrays each way, Flower's framing aside
    clients = [len(trained(cfg, worker.dataset.num_clients, r)) for r in range(cfg.rounds)]
    for r in range(cfg.rounds):
        last = r == cfg.rounds - 1
        row = RoundRow(
            run_id, r, history.get(r + 1, {}).get("train_loss"), result.accuracy if last else None,
            result.loss if last else None, sent * clients[r], sent * clients[r], 0.0, 0.0, 0, clients[r],
        )  # fmt: skip
        if store is not None:
            store.log_round(run_id, row, [])
    up = sent * sum(clients)
    return Summary(
        run_id=run_id, rounds=cfg.rounds, clients=worker.dataset.num_clients, final_accuracy=result.accuracy,
        final_loss=result.loss, wall_s=wall_s, rounds_s=wall_s, train_s=0.0, samples=0, samples_per_s=0.0,
        bytes_up=up, bytes_down=up, peak_rss_mb=peak_rss_mb(), devices=1, virtual_s=0.0, bytes_moved=0,
        checkpoint_s=0.0, executor="flower", task=build_task(cfg.task).name, final_metrics=result.metrics(),
        algorithm=cfg.algorithm.kind, dataset=cfg.data.dataset, best_accuracy=result.accuracy,
    )  # fmt: skip
