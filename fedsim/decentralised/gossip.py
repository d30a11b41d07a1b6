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
from collections.abc import Callable, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fedsim.algorithms import build_algorithm
from fedsim.algorithms.gossip import GossipRule
from fedsim.algorithms.lgd import Lgd
from fedsim.algorithms.local_sgd import batch_schedule
from fedsim.comm.ledger import FLOAT32_BYTES, ByteLedger
from fedsim.config import RunConfig
from fedsim.data.base import FederatedDataset
from fedsim.data.blocks import ClientBlocks
from fedsim.data.build import run_dataset
from fedsim.decentralised import checkpoint as gossip_checkpoint
from fedsim.decentralised.topology import Topology
from fedsim.models import ModelFactory
from fedsim.runstore import ClientRow, RoundRow, RunStore
from fedsim.sim.executors.threads import choose_threads
from fedsim.sim.persist import checkpoint
from fedsim.sim.persist.interrupted import stop_point
from fedsim.sim.rounds.cohort import client_generator
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.rounds.record import record_callback_metrics
from fedsim.sim.rounds.run_loop import run_rounds
from fedsim.sim.rounds.summary import Summary, peak_rss_mb, strict
from fedsim.sim.runtime.accelerator import Accelerator
from fedsim.sim.runtime.allocator import tune_malloc
from fedsim.sim.runtime.placement import place_data, placed_replica, placed_test
from fedsim.sim.runtime.pool import current_pool
from fedsim.sim.state.state_store import build_state_store
from fedsim.streams import seed_model_randomness
from fedsim.tasks import EvalResult, Task, build_task, evaluation_sums
from fedsim.tasks.custom import LossFn

DRAWN_NODES = 256  # a graph the dashboard can draw: its edges go into round 0's row


class GossipEngine:
    """Builds a decentralised run from its config (``topology`` set, a gossip algorithm) and runs it."""

    def __init__(
        self,
        cfg: RunConfig,
        out_dir: Path,
        db_path: Path = Path("runs/fedsim.db"),
        dataset: FederatedDataset | None = None,
        resume: bool = False,
        model: ModelFactory | nn.Module | None = None,
        task: Task | LossFn | None = None,
    ) -> None:
        self.started = time.perf_counter()
        tune_malloc()
        self.cfg, self.out_dir, self.db_path = cfg, out_dir, db_path
        self.pool = current_pool()
        gossip_checkpoint.check_one_rank(cfg, self.pool)
        self.accelerator = Accelerator.resolve(cfg.accelerator)
        self.dataset = run_dataset(cfg, dataset)
        if cfg.topology.nodes is not None:  # nodes as blocks of clients (device groups): each trains on their data
            self.dataset = ClientBlocks(self.dataset, cfg.topology.nodes)
        place_data(self.dataset, self.accelerator, cfg.data_on_device_mb * 2**20)
        self.test_shard = self.pool.shard(placed_test(self.dataset, self.accelerator))
        self.task = build_task(cfg.task, task)
        self.replica = placed_replica(cfg, self.dataset, self.task, model, self.accelerator)
        self.initial = self.replica.flat.clone()  # every node starts from the same model
        self.average = self.initial.clone()  # the nodes' average model, what is evaluated and saved
        self.threads_note = choose_threads(cfg.threads, self.replica.numel, self.accelerator.is_cuda, self.pool.world)
        n = self.dataset.num_clients
        rule: GossipRule = build_algorithm(cfg.algorithm, n)  # type: ignore[assignment]  # RunConfig checked it
        self.rule = rule
        # the graph nodes mix over; LGD builds its own at each election (its leaders), none in between
        self.topology = Topology.build(cfg.topology, n) if cfg.topology.enabled else Topology.identity(n)
        self.store = build_state_store(cfg.state, out_dir / "state")
        self.ledger = ByteLedger()
        self.mine = list(range(self.pool.rank, n, self.pool.world))
        self.message_bytes = FLOAT32_BYTES * self.replica.numel
        batch = cfg.algorithm.batch_size  # each node's batch, every round: its samples a round
        self.batch = [min(batch, self.dataset.n_samples(i)) for i in range(n)]
        self.last_eval: EvalResult | None = None
        self.consensus = float("nan")
        self.next_round = 0
        self.stopped = False  # by the caller's after_round, before cfg.rounds
        self.totals = {"rounds_s": 0.0, "train_s": 0.0, "samples": 0.0, "best_accuracy": 0.0, "checkpoint_s": 0.0}
        self.runstore: RunStore | None = None
        self.run_id = ""
        self.callback_metrics: dict[str, float] = {}  # the latest value of each metric a callback recorded
        self.writer = checkpoint.BackgroundWriter(out_dir / "checkpoints", cfg.checkpoint.keep)
        if resume:
            self.runstore = RunStore(db_path) if self.pool.is_root else None
            gossip_checkpoint.restore(self)

    # ----------------------------------------------------------------------------------------- one round

    def round(self, r: int) -> RoundRow:
        """Run round ``r`` (0-based) on this rank; returns the round's row (written by rank 0)."""
        self._begin()
        t0 = time.perf_counter()
        lr, device, p = self.cfg.algorithm.client_lr(r), self.accelerator.device, self.replica.n_params
        losses, marks = [], []
        for i in self.mine:  # each node's gradient and message
            stop_point()
            start = time.time()
            x, m = self._model(i)
            g, loss = self._gradient(i, r, x)
            message, kept = self.rule.send(x[:p], m, g, lr)
            message = torch.cat([message, self.replica.flat[p:]])  # float buffers (BatchNorm's) go as they are
            self.store.put(i, {"x": x, "msg": message} | {f"kept.{k}": v for k, v in kept.items()})
            losses.append(loss)
            marks.append((start, time.time()))
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
        evaluated = self._evaluate() if self._due(r) else None
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
        self.next_round = r + 1
        self.totals["checkpoint_s"] += gossip_checkpoint.checkpoint_if_due(self, r)
        return row

    def _model(self, i: int) -> tuple[Tensor, Tensor | None]:
        """Node i's model and momentum (the initial model and zeros before its first round)."""
        state, device = self.store.get(i), self.accelerator.device
        x = self.initial if state is None else state["x"].to(device)
        if not self.rule.keeps_momentum:
            return x, None
        m = state.get("m") if state is not None else None
        return x, torch.zeros(self.replica.n_params, device=device) if m is None else m.to(device)

    def _gradient(self, i: int, r: int, x: Tensor) -> tuple[Tensor, Tensor]:
        """One stochastic gradient of node i's loss at ``x``: its first batch of the round, drawn by the client's
        own generator as local SGD draws it; weight decay added; the model's own randomness (dropout) seeded from
        that generator, as a client's is. Returns (gradient, the batch's loss)."""
        cfg, replica = self.cfg.algorithm, self.replica
        data = self.dataset.client(i)
        generator = client_generator(self.cfg.seed, r, i)
        perm, _ = next(batch_schedule(data.n_samples, cfg, generator))
        seed_model_randomness(generator, self.accelerator.device)
        batch = data.take(perm[: self.batch[i]])
        xb, yb = self.accelerator.to_device(batch.x), self.accelerator.to_device(batch.y)
        replica.load_(x)
        if not replica.module.training:  # train() walks every submodule: only after an evaluation
            replica.module.train()
        loss = self.task.loss(replica.module(xb), yb)
        g = torch.cat([t.reshape(-1) for t in replica.gradients(loss)])  # the flat gradient, one new tensor
        if cfg.weight_decay:
            g.add_(x[: replica.n_params], alpha=cfg.weight_decay)
        return g, loss.detach()

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

    def run(self, after_round: Callable[[RoundRow], bool | None] | None = None) -> Summary:
        """All rounds, then ``summary.json`` and ``model.safetensors`` (the average model) from rank 0; as the
        federated engine's (:func:`fedsim.sim.rounds.run_loop.run_rounds`)."""
        return run_rounds(self, after_round)

    def announce(self) -> None:
        """Nothing beyond the threads line."""

    def stop_before(self, r: int) -> bool:
        return False

    def final_model(self) -> Tensor:
        return self.average

    def summary_fields(self, summary: Summary) -> dict[str, Any]:
        fields = summary.as_dict(skewscout=False) | {"topology": self.cfg.topology.kind}
        fields["consensus_distance"] = strict(self.consensus)
        return fields

    def summary(self) -> Summary:
        final, rounds_s = self.last_eval, self.totals["rounds_s"]
        return Summary(
            run_id=self.run_id,
            rounds=self.next_round,
            clients=self.topology.n,
            final_accuracy=final.accuracy if final else float("nan"),
            final_loss=final.loss if final else float("nan"),
            wall_s=time.perf_counter() - self.started,
            rounds_s=rounds_s,
            train_s=self.totals["train_s"],
            samples=int(self.totals["samples"]),
            samples_per_s=self.totals["samples"] / max(rounds_s, 1e-9),
            bytes_up=self.ledger.total_up,
            bytes_down=self.ledger.total_down,
            bytes_up_uncompressed=self.ledger.total_up,  # a node's message goes dense
            peak_rss_mb=peak_rss_mb(),
            devices=self.cfg.devices,
            virtual_s=0.0,
            bytes_moved=self.ledger.moved,
            checkpoint_s=self.totals["checkpoint_s"],
            accelerator=self.accelerator.name,
            executor="gossip",
            task=self.task.name,
            final_metrics=final.metrics() if final else {},
            algorithm=self.cfg.algorithm.kind,
            dataset=self.cfg.data.dataset,
            best_accuracy=self.totals["best_accuracy"] if final is not None else float("nan"),
            threads=torch.get_num_threads(),
            callback_metrics=dict(self.callback_metrics),
            stages=[stage.as_dict() for stage in round_plan(self.cfg)],
        )

    def record_metrics(self, row: RoundRow, metrics: Mapping[str, float]) -> None:
        """A callback's ``metrics`` for round ``row.round``, as
        :meth:`fedsim.sim.rounds.engine.Engine.record_metrics`."""
        record_callback_metrics(row, metrics, self.callback_metrics, self.runstore, self.run_id)

    def close(self) -> None:
        self.store.close()
        if self.runstore is not None:
            self.runstore.close()

    # ----------------------------------------------------------------------------------------- pieces

    def _begin(self) -> None:
        if self.run_id:
            return
        if self.pool.is_root:
            self.runstore = RunStore(self.db_path)
            cfg = self.cfg
            self.run_id = self.runstore.start_run(cfg.name, "simulation", cfg.model_dump(mode="json"), cfg.rounds)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n")
        self.run_id = self.pool.broadcast(self.run_id)

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

    def _due(self, r: int) -> bool:
        every = self.cfg.eval_every
        return r == self.cfg.rounds - 1 or (every > 0 and (r + 1) % every == 0)

    def _evaluate(self) -> EvalResult:
        """The average model on the test set, every rank scoring its shard; one all-reduce."""
        sums = evaluation_sums(self.replica, self.average, self.test_shard, self.cfg.eval_batch_size, self.task)
        self.ledger.record_moved(self.pool.all_reduce_(sums))
        self.last_eval = self.task.result(sums)
        if math.isfinite(self.last_eval.accuracy):
            self.totals["best_accuracy"] = max(self.totals["best_accuracy"], self.last_eval.accuracy)
        return self.last_eval

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
