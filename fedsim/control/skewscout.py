"""SkewScout in the simulator: set the knob each round, probe by model traveling, let the band policy decide.

On a probe round the controller samples its (i, j) pairs first and, after the round, scores partition i's
model on a fixed sample of j's training data against j's own model. A partition's model is, with the
local-steps knob, its local model as it leaves local training; with a compressor's knob (top-k's fraction,
PowerSGD's rank, QSGD's levels), the new global model plus the part of its update it has not sent (its
error-feedback residual, which lives in the client's state in the store like any client state, or for a
compressor without memory the round's compression error): what it knows that the others do not. Each traveling model is
charged to the ledger as one upload and one download of the model (kind ``probe``). The decision takes effect
from the next round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedsim.comm.uplink import Uplink
from fedsim.config import AlgorithmConfig, ConfigError, FixedControl, SkewScoutControl
from fedsim.config.control import COMPRESSOR_KNOBS
from fedsim.control.band import BandPolicy, Decision
from fedsim.control.estimate import TravelEstimator
from fedsim.control.fixed import knob_name, local_settings, round_steps, start_value
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.models.replica import Replica
from fedsim.tasks.evaluate import evaluate


@dataclass(frozen=True)
class Probe:
    decision: Decision
    gaps: list[tuple[int, int, float]]
    bytes: int
    seconds: float  # compute spent scoring the traveling models


class Controller:
    """The knob's current value, the probes and the band policy of one run."""

    def __init__(
        self,
        cfg: FixedControl | SkewScoutControl,
        algorithm: Any,
        dataset: FederatedDataset,
        seed: int,
        uplink: Uplink | None = None,
    ) -> None:
        self.cfg = cfg
        self.uplink = uplink  # the clients' compressor, whose knob this may turn
        self.algorithm = algorithm
        self.dataset = dataset
        self.value: float | None = start_value(cfg)  # the engine checked the knob (fedsim.control.fixed)
        self.policy: BandPolicy | None = None
        self.estimator: TravelEstimator | None = None
        if isinstance(cfg, SkewScoutControl):
            if dataset.num_clients < 2:
                raise ConfigError("control.kind=skewscout needs at least 2 partitions (data.clients)")
            self.policy = BandPolicy(cfg.knob.rungs, *cfg.target, start=cfg.knob.start_rung)
            self.estimator = TravelEstimator(dataset.num_clients, cfg.pairs, cfg.smoothing, seed)
        self.seed = seed
        self.steps_done = 0
        self.probe_bytes = 0
        self.probe_s = 0.0
        self._pairs: list[tuple[int, int]] = []
        self._wanted: set[int] = set()
        self._models: dict[int, Tensor] = {}
        self._samples: dict[int, ClientData] = {}

    @property
    def knob_name(self) -> str:
        return knob_name(self.cfg)

    @property
    def tunes_compressor(self) -> bool:
        return self.knob_name in COMPRESSOR_KNOBS

    def begin_round(self, r: int) -> None:
        """Apply the knob; on a probe round, choose the pairs whose local models are kept."""
        if self.value is not None and self.tunes_compressor and self.uplink is not None:
            self.uplink.compressor.set_knob(self.value)
        self._models.clear()
        self._pairs, self._wanted = [], set()
        cfg = self.cfg
        if self.estimator is not None and isinstance(cfg, SkewScoutControl) and (r + 1) % cfg.probe_every == 0:
            self._pairs = self.estimator.sample_pairs()
            self._wanted = {c for pair in self._pairs for c in pair}
        if self.uplink is not None:  # a probe round's pairs: their unsent updates are kept until it ends
            self.uplink.begin_round(r, self._wanted if self.tunes_compressor else None)

    def settings(self, algorithm: AlgorithmConfig) -> AlgorithmConfig:
        """Local training's settings this round (:class:`~fedsim.algorithms.base.RoundContext`): ``algorithm``
        with the local_steps knob's value, where that is the knob."""
        return local_settings(algorithm, self.knob_name, self.value)

    @property
    def observer(self) -> Callable[[int, Tensor], None] | None:
        """:meth:`capture` on a round that keeps local models (a local_steps probe); None on every other, so
        an executor need not hold the local models apart from their deltas."""
        return self.capture if self._wanted and self.knob_name == "local_steps" else None

    def capture(self, cid: int, local_model: Tensor) -> None:
        """Called as each client's local training ends, with its flat local model."""
        if cid in self._wanted and self.knob_name == "local_steps":
            self._models[cid] = local_model.clone()

    def _sample(self, cid: int, device: torch.device) -> ClientData:
        """A fixed sample of ``cid``'s training data on ``device`` (where the probing replica lives)."""
        if cid not in self._samples:
            data = self.dataset.client(cid)
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + cid)
            size = self.cfg.sample if isinstance(self.cfg, SkewScoutControl) else data.n_samples
            keep = torch.randperm(data.n_samples, generator=g, device="cpu")[:size].to(data.x.device)
            self._samples[cid] = ClientData(data.x[keep].to(device), data.y[keep].to(device))
        return self._samples[cid]

    def end_round(self, replica: Replica, global_state: Tensor, model_bytes: int) -> Probe | None:
        """Count the round's steps; on a probe round score the pairs and decide. Leaves ``replica`` dirty."""
        self.steps_done += round_steps(self.algorithm.cfg, self.knob_name, self.value)
        if self.tunes_compressor and self.uplink is not None:
            for c, residual in self.uplink.residuals.items():  # its view: the shared model plus what it has not sent
                self._models[c] = global_state + residual.to(global_state.device)
        pairs = [(i, j) for i, j in self._pairs if i in self._models and j in self._models]  # dropped clients
        if not pairs or self.estimator is None or self.policy is None:
            return None

        def score(i: int, j: int) -> float:
            return evaluate(replica, self._models[i], self._sample(j, replica.flat.device), 1024).accuracy

        t0 = time.perf_counter()
        estimate, gaps = self.estimator.probe(score, pairs)
        seconds = time.perf_counter() - t0
        self.probe_s += seconds
        decision = self.policy.decide(estimate)
        self.value = decision.new
        moved = 2 * model_bytes * len(pairs)
        self.probe_bytes += moved
        self._models.clear()
        return Probe(decision, gaps, moved, seconds)

    def state_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "steps_done": self.steps_done,
            "probe_bytes": self.probe_bytes,
            "probe_s": self.probe_s,
            "policy": self.policy.state_dict() if self.policy else None,
            "estimator": self.estimator.state_dict() if self.estimator else None,
        }

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor] | None = None) -> None:
        self.value = state["value"]
        self.steps_done = int(state["steps_done"])
        self.probe_bytes = int(state["probe_bytes"])
        self.probe_s = float(state.get("probe_s", 0.0))
        if self.policy is not None:
            self.policy.load_state_dict(state["policy"])
        if self.estimator is not None:
            self.estimator.load_state_dict(state["estimator"])

    @staticmethod
    def residuals_of(tensors: dict[str, Tensor]) -> dict[int, Tensor]:
        """Top-k residuals by client from a checkpoint written before they lived in the state store."""
        return {int(k.split(".", 1)[1]): v for k, v in tensors.items() if k.startswith("residual.")}
