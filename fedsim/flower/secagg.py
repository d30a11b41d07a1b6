"""fedsim's clients under Flower's own SecAgg+: ``secaggplus_mod`` on the client, ``SecAggPlusWorkflow`` on the
server, so a deployment aggregates with Flower's protocol what ``fedsim run`` simulates with ``secagg:``.

The ClientApp trains exactly the client update :mod:`fedsim.flower.app` trains (the same data, model, algorithm and
RNG stream) and replies with its *update* (local - global) and its weight, which Flower's mod quantizes, masks
and sends; Flower's workflow unmasks the weighted mean update, and :class:`SecureFedAvg` adds it to the global
model, which is what fedsim's server step does with the sum SecAgg+ releases. The workflow trains every
client each round (Flower's FedAvg picks them), so a config must train all its clients every round.

    from fedsim.flower.secagg import secure_client_app, secure_server_app
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from flwr.app import Context
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import Grid, LegacyContext, ServerConfig
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import ServerApp
from safetensors.torch import save_file

from fedsim.config import ConfigError, local_training
from fedsim.flower.app import FlowerSettings, FlowerWorker, check_supported, worker_for
from fedsim.privacy.secagg import secagg_max_weight

NDArrays = list[np.ndarray]


def check_secure(cfg: FlowerSettings) -> None:
    """Raise :class:`ConfigError` for configs the Flower SecAgg+ apps cannot run as fedsim does."""
    check_supported(cfg)
    if not cfg.secagg.enabled:
        raise ConfigError(
            "the Flower SecAgg+ apps need secagg.kind: secagg_plus (num_shares, reconstruction_threshold)"
        )
    if cfg.cohort_size != cfg.data.clients or cfg.emulation.dropout or cfg.emulation.availability < 1:
        raise ConfigError("the Flower SecAgg+ apps train every client each round: leave clients_per_round unset")


class FedsimUpdateClient(NumPyClient):
    """One fedsim client whose ``fit`` replies with its update, for Flower's SecAgg+ mod to mask."""

    def __init__(self, worker: FlowerWorker, cid: int) -> None:
        self.worker, self.cid = worker, cid

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        worker, module = self.worker, self.worker.replica.module
        state = {n: torch.from_numpy(np.asarray(a)) for n, a in zip(module.state_dict(), parameters, strict=True)}
        _, result = worker.update(self.cid, int(config["server-round"]) - 1, state)
        worker.replica.load_(result.sums["delta"])  # weight 1: the sum is the client's update
        update = [t.detach().numpy().copy() for t in module.state_dict().values()]
        return update, int(worker.weight(self.cid)), {"train_loss": result.loss.item(), "partition-id": self.cid}


def secure_client_app(cfg: FlowerSettings) -> ClientApp:
    """A ClientApp with Flower's ``secaggplus_mod`` whose clients train fedsim's client update."""
    check_secure(cfg)
    cfg_json = cfg.model_dump_json()

    def client_fn(context: Context) -> object:
        cid = int(str(context.node_config["partition-id"]))
        return FedsimUpdateClient(worker_for(cfg_json), cid).to_client()

    return ClientApp(client_fn=client_fn, mods=[secaggplus_mod])  # type: ignore[arg-type]


class SecureFedAvg(FedAvg):
    """Flower's FedAvg whose results carry SecAgg+'s unmasked weighted mean update (the workflow puts it in
    every result): the new global model is the old one plus that update. ``aggregates`` keeps each round's."""

    def __init__(self, initial: NDArrays, clients: int) -> None:
        super().__init__(
            fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients, min_available_clients=clients,
            initial_parameters=ndarrays_to_parameters(initial), on_fit_config_fn=lambda r: {"server-round": r},
        )  # fmt: skip
        self.current = [a.copy() for a in initial]
        self.aggregates: dict[int, NDArrays] = {}

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if not results:
            return None, {}
        mean_update = parameters_to_ndarrays(results[0][1].parameters)
        self.aggregates[server_round] = mean_update
        self.current = [(g + u).astype(g.dtype) for g, u in zip(self.current, mean_update, strict=True)]
        return ndarrays_to_parameters(self.current), {}


def secure_server_app(cfg: FlowerSettings, out_dir: Path, strategy_out: list[SecureFedAvg] | None = None) -> ServerApp:
    """A ServerApp running Flower's ``SecAggPlusWorkflow`` with fedsim's ``secagg`` settings for ``cfg.rounds``;
    writes ``out_dir/model.safetensors``. ``strategy_out`` receives the strategy (its per-round aggregates)."""
    check_secure(cfg)
    app = ServerApp()
    s = cfg.secagg

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        worker = FlowerWorker.build(cfg)
        module = worker.replica.module
        strategy = SecureFedAvg([t.detach().numpy().copy() for t in module.state_dict().values()], cfg.data.clients)
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=cfg.rounds), strategy=strategy)
        uniform = local_training(cfg.algorithm).weighting == "uniform"
        max_weight = secagg_max_weight(s, uniform)  # DP is refused here
        workflow = SecAggPlusWorkflow(
            num_shares=s.num_shares, reconstruction_threshold=s.reconstruction_threshold,
            max_weight=max_weight, clipping_range=s.clipping_range, quantization_range=s.quantization_range,
            modulus_range=s.modulus_range,
        )  # fmt: skip
        DefaultWorkflow(fit_workflow=workflow)(grid, legacy)
        names = list(module.state_dict())
        module.load_state_dict({n: torch.from_numpy(a) for n, a in zip(names, strategy.current, strict=True)})
        out_dir.mkdir(parents=True, exist_ok=True)
        save_file({"global": worker.replica.flat.clone()}, out_dir / "model.safetensors")
        if strategy_out is not None:
            strategy_out.append(strategy)

    return app
