"""The round loop of decentralised training: nodes that keep their own models and gossip over a topology.

Read top to bottom, one round is: every node (a client of the dataset; node i on rank ``i % world``) takes one
stochastic gradient at its own model and hands its rule (:mod:`fedsim.algorithms.gossip`) the message it sends
its neighbours; the messages other ranks' nodes hear are gathered once; every node mixes ``sum_j W_ij msg_j``
(:class:`fedsim.decentralised.topology.Topology`) into its new model; one all-reduce adds the nodes' models,
their squared norms and losses, which give the average model (evaluated every ``eval_every`` rounds) and the consensus
distance ``(1/n) sum_i ||x_i - x_bar||^2``. A node's model, momentum and message live in the state store (memory
or disk), so memory does not grow with the nodes. Each node's message is charged to the ledger once for every
neighbour that hears it.
"""

from __future__ import annotations

import functools
import json
import math
import time
from itertools import chain
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fedsim.algorithms import build_algorithm
from fedsim.algorithms.gossip import GossipConfig, GossipRule
from fedsim.algorithms.lgd import Lgd
from fedsim.comm.ledger import FLOAT32_BYTES
from fedsim.config import ConfigError
from fedsim.data.base import FederatedDataset
from fedsim.data.blocks import ClientBlocks
from fedsim.decentralised.gradients import NodeBatches, fused_gradients, sequential_gradients
from fedsim.decentralised.topology import Topology
from fedsim.models import ModelFactory
from fedsim.runstore import ClientRow, RoundRow
from fedsim.sim.executors.threads import choose_threads
from fedsim.sim.persist.interrupted import stop_point
from fedsim.sim.persist.kept import Saved, Value, Weights
from fedsim.sim.rounds.summary import Summary, strict
from fedsim.sim.run.context import RunContext
from fedsim.sim.run.settings import RunSettings
from fedsim.sim.runtime.pool import current_pool
from fedsim.tasks import Task
from fedsim.tasks.custom import LossFn

DRAWN_NODES = 256  # a graph the dashboard can draw: its edges go into round 0's row


class GossipEngine(RunContext):
    """Builds a decentralised run from its config (``topology`` set, a gossip algorithm) and runs it."""

    def __init__(
        self,
        cfg: RunSettings,
        out_dir: Path,
        db_path: Path = Path("runs/fedsim.db"),
        dataset: FederatedDataset | None = None,
        resume: bool = False,
        model: ModelFactory | nn.Module | None = None,
        task: Task | LossFn | None = None,
    ) -> None:
        check_one_rank(cfg, current_pool().world)
        super().__init__(cfg, out_dir, db_path, dataset, model, task, clients=functools.partial(_nodes, cfg))
        self.initial = self.replica.flat.clone()  # every node starts from the same model
        self.average = self.initial.clone()  # the nodes' average model, what is evaluated and saved
        self.threads_note = choose_threads(cfg.threads, self.replica.numel, self.accelerator.is_cuda, self.pool.world)
        n = self.dataset.num_clients
        rule, settings = build_algorithm(cfg.algorithm, n), cfg.algorithm
        if not isinstance(rule, GossipRule) or not isinstance(settings, GossipConfig):
            raise ConfigError(f"algorithm.kind={settings.kind} is not a gossip rule: it has a server")
        self.rule = rule
        # the graph nodes mix over; LGD builds its own at each election (its leaders), none in between
        self.topology = Topology.build(cfg.topology, n) if cfg.topology.enabled else Topology.identity(n)
        self.mine = list(range(self.pool.rank, n, self.pool.world))
        self.message_bytes = FLOAT32_BYTES * self.replica.numel
        batch = cfg.algorithm.batch_size  # each node's batch, every round: its samples a round
        self.batch = [min(batch, self.dataset.n_samples(i)) for i in range(n)]
        batches = NodeBatches(self.dataset, settings, cfg.seed, self.batch)
        fused = cfg.executor.kind == "fused"  # K nodes' gradients at once, as the fused executor trains K clients
        taking = fused_gradients if fused else sequential_gradients
        self.gradients = taking(self.replica, self.task, batches, self.accelerator)
        self.fused, self.group = fused, cfg.executor.clients if fused else 1
        self.executor_kind = "fused" if fused else "sequential"
        self.consensus = float("nan")
        if resume:
            self.resume()

    # ----------------------------------------------------------------------------------------- one round

    def round(self, r: int) -> RoundRow:
        """Run round ``r`` (0-based) on this rank; returns the round's row (written by rank 0)."""
        t0 = time.perf_counter()
        lr, device, p = self.cfg.algorithm.client_lr(r), self.accelerator.device, self.replica.n_params
        losses, marks = [], []
        for at in range(0, len(self.mine), self.group):  # each node's gradient and message, a group at a time
            stop_point(inner=True)
            start, group = time.time(), self.mine[at : at + self.group]
            models = [self._model(i) for i in group]
            taken = self.gradients(group, r, [x for x, _ in models])
            for i, (x, m), (g, loss) in zip(group, models, taken, strict=True):
                message, kept = self.rule.send(x[:p], m, g, lr)
                buffers = x[p:] if self.fused else self.replica.flat[p:]  # BatchNorm's as training left them
                self.store.put(
                    i, {"x": x, "msg": torch.cat([message, buffers])} | {f"kept.{k}": v for k, v in kept.items()}
                )
                losses.append(loss)
            marks += [(start, time.time())] * len(group)
        t_train = time.perf_counter() - t0
        nodes = self._node_rows(losses, marks)  # (node, device, start, end, loss) of every rank: one read
        graph, extra = self._graph_of(r, [row[4] for row in nodes])
        heard = self._messages_from_other_ranks(graph)
        sums = torch.zeros(self.replica.numel + 1, dtype=torch.float64, device=device)  # sum x, sum ||x||^2
        for i in self.mine:  # each node mixes what it heard and takes its rule's step
            state = self.store.get(i)
            assert state is not None
            mixed = graph.mix(i, functools.partial(self._message, heard))
            x = state["x"].to(device)
            kept = {k.removeprefix("kept."): v.to(device) for k, v in state.items() if k.startswith("kept.")}
            params, m = self.rule.combine(mixed[:p], x[:p], kept, lr)
            x = torch.cat([params, mixed[p:]])
            self.store.put(i, {"x": x, "msg": state["msg"]} | ({} if m is None else {"m": m}))
            sums[:-1].add_(x.double())
            sums[-1].add_(params.double().square().sum())
        self.ledger.record_moved(self.pool.all_reduce_(sums))
        n = graph.n
        self.average = (sums[:-1] / n).float()
        mean = sums[:p] / n
        self.consensus = max(float(sums[-1] / n - mean.square().sum()), 0.0)  # (1/n) sum ||x_i - x_bar||^2
        train_loss = sum(row[4] for row in nodes) / n
        sent = sum(len(heard_by) for heard_by in graph.receivers) * self.message_bytes
        self.ledger.charge(up=sent, down=sent)
        if "leader" in extra:  # an election: every node reported its loss
            self.ledger.charge(up=FLOAT32_BYTES * n, kind="loss")
        bytes_up, bytes_down = self.ledger.close_round()
        evaluated = self._evaluate() if self.eval_due(r) else None
        samples = sum(self.batch)
        row = RoundRow(
            run_id=self.run_id,
            round=r,
            train_loss=train_loss if math.isfinite(train_loss) else None,
            test_accuracy=None if evaluated is None or math.isnan(evaluated.accuracy) else evaluated.accuracy,
            test_loss=None if evaluated is None else evaluated.loss,
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            wall_s=time.perf_counter() - t0,
            train_s=t_train,
            samples=samples,
            clients=n,
            metrics_json=json.dumps(strict({"consensus_distance": self.consensus, "lr": lr} | extra)),
        )
        if self.runstore is not None:
            clients = [ClientRow(self.run_id, r, i, d, s, e, self.batch[i], v) for i, d, s, e, v in nodes]
            self.runstore.log_round(self.run_id, row, clients)
        self.totals["rounds_s"] += time.perf_counter() - t0
        self.totals["train_s"] += t_train
        self.totals["samples"] += samples
        return row

    def _model(self, i: int) -> tuple[Tensor, Tensor | None]:
        """Node i's model and momentum (the initial model and zeros before its first round)."""
        state, device = self.store.get(i), self.accelerator.device
        x = self.initial if state is None else state["x"].to(device)
        if not self.rule.keeps_momentum:
            return x, None
        m = state.get("m") if state is not None else None
        return x, torch.zeros(self.replica.n_params, device=device) if m is None else m.to(device)

    def _message(self, heard: dict[int, Tensor], j: int) -> Tensor:
        """Node j's message this round, on this rank's device: from another rank, or from the store."""
        if j in heard:
            return heard[j].to(self.accelerator.device)
        sent = self.store.get(j)
        assert sent is not None
        return sent["msg"].to(self.accelerator.device)

    def _messages_from_other_ranks(self, graph: Topology) -> dict[int, Tensor]:
        """The messages of other ranks' nodes that this rank's nodes hear: each rank sends only those of its own
        nodes that a node elsewhere hears (one all-gather)."""
        world, rank = self.pool.world, self.pool.rank
        if world == 1:
            return {}
        outgoing = {}
        for j in self.mine:
            if any(i % world != rank for i in graph.receivers[j]):
                state = self.store.get(j)
                assert state is not None
                outgoing[j] = state["msg"]
        gathered, moved = self.pool.all_gather(outgoing)
        self.ledger.record_moved(moved)
        return {j: t for part in gathered for j, t in part.items() if j % world != rank}

    # ----------------------------------------------------------------------------------------- the run

    def final_model(self) -> Tensor:
        return self.average

    def summary_fields(self, summary: Summary) -> dict[str, Any]:
        fields = summary.as_dict(skewscout=False) | {"topology": self.cfg.topology.kind}
        fields["consensus_distance"] = strict(self.consensus)
        return fields

    def summary_parts(self) -> dict[str, Any]:
        """A node's message goes dense; no virtual clock yet; every node trains every round."""
        return {"clients": self.topology.n, "virtual_s": 0.0, "executor": "fused" if self.fused else "gossip"} | {
            "bytes_up_uncompressed": self.ledger.total_up
        }

    def not_on_root(self) -> str:
        """Each rank holds its own nodes' models: rank 0 checkpoints a run of one rank only."""
        return "the nodes' models the other ranks hold" if self.pool.world > 1 else ""

    def saved_parts(self) -> list[Saved]:
        """The nodes' average model and their consensus distance; the nodes' models, momenta and messages are
        in the state store. A node's batches come from its own (seed, round, node) generator and LGD elects
        from the round's losses, so nothing else carries over."""

        def consensus(saved: float) -> None:
            self.consensus = float(saved)

        return [
            Saved("average", Weights(self.average, "average"), always=True),
            Saved("consensus", Value(lambda: self.consensus, consensus), always=True),
        ]

    # ----------------------------------------------------------------------------------------- pieces

    def _graph_of(self, r: int, losses: list[float]) -> tuple[Topology, dict[str, object]]:
        """The graph round ``r`` mixes over, and what its row records of it: the topology's edges in round 0
        (up to ``DRAWN_NODES`` nodes, for the dashboard), or LGD's leaders when it elects them."""
        if isinstance(self.rule, Lgd):
            if not self.rule.elects(r):
                return self.topology, {}
            rows = self.rule.rows(losses, self.cfg.devices)
            leader = min(range(len(losses)), key=lambda i: (losses[i], i))
            return Topology("leaders", rows), {"leader": leader}
        if r != 0 or self.topology.n > DRAWN_NODES:
            return self.topology, {}
        return self.topology, {"topology": self.topology.kind, "nodes": self.topology.n, "edges": self.topology.edges()}

    def _node_rows(
        self, losses: list[Tensor], marks: list[tuple[float, float]]
    ) -> list[tuple[int, int, float, float, float]]:
        """Every node's (id, device, start, end, batch loss), gathered from every rank, by node: this rank's
        losses are read back once."""
        values = torch.stack(losses).tolist() if losses else []
        mine = [(i, i % self.cfg.devices, s, e, v) for i, (s, e), v in zip(self.mine, marks, values, strict=True)]
        gathered, moved = self.pool.all_gather(mine)
        self.ledger.record_moved(moved)
        return sorted(chain.from_iterable(gathered))


def check_one_rank(cfg: RunSettings, world: int) -> None:
    """A decentralised run checkpoints on one rank: each rank holds its own nodes' models, rank 0 writes."""
    if cfg.checkpoint.fixed and world > 1:  # auto takes none there, with a warning
        raise ConfigError(
            f"checkpoint.every={cfg.checkpoint.fixed}: a decentralised run checkpoints on one rank only, not"
            f" {world} (each rank holds its own nodes' models)"
        )


def _nodes(cfg: RunSettings, dataset: FederatedDataset) -> FederatedDataset:
    """The nodes that gossip: the dataset's clients, or blocks of them (device groups) with ``topology.nodes``."""
    return ClientBlocks(dataset, cfg.topology.nodes) if cfg.topology.nodes is not None else dataset
