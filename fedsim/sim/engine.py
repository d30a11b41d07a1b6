"""The round loop of a federated simulation.

Read top to bottom, one round is: sample a cohort, let each device train its clients one after another on its
one replica into a local sum, combine the sums (one all-reduce when there are several devices), apply the
server update, write the round to the run store, and every ``eval_every`` rounds evaluate.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from fedsim.algorithms import build_algorithm
from fedsim.comm.ledger import ByteLedger
from fedsim.config import RunConfig
from fedsim.data import build_dataset
from fedsim.data.base import FederatedDataset
from fedsim.models import Replica, build_model
from fedsim.runstore import ClientRow, RoundRow, RunStore
from fedsim.sim.cohort import sample_cohort
from fedsim.sim.device import ClientRecord, Device, message_sizes
from fedsim.sim.evaluate import EvalResult, evaluate
from fedsim.sim.progress import RoundProgress
from fedsim.sim.state_store import build_state_store


@dataclass(frozen=True)
class Summary:
    """What ``summary.json`` holds. Seconds are wall-clock; ``train_s`` is time spent inside devices."""

    run_id: str
    rounds: int
    clients: int
    final_accuracy: float
    final_loss: float
    wall_s: float
    rounds_s: float
    train_s: float
    samples: int
    samples_per_s: float
    bytes_up: int
    bytes_down: int
    peak_rss_mb: float


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


class Engine:
    """Builds a run from its config and executes it round by round.

    ``dataset`` may be passed in (benchmarks build one directly); otherwise it is built from ``cfg.data``.
    """

    def __init__(
        self,
        cfg: RunConfig,
        out_dir: Path,
        db_path: Path = Path("runs/fedsim.db"),
        dataset: FederatedDataset | None = None,
    ) -> None:
        self.started = time.perf_counter()
        self.cfg = cfg
        self.out_dir = out_dir
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.dataset = dataset if dataset is not None else build_dataset(cfg.data, cfg.seed)
        module = build_model(cfg.model, self.dataset.input_shape, self.dataset.num_classes, cfg.seed)
        replica = Replica(module)
        self.global_state = replica.flat.clone()
        self.algorithm = build_algorithm(cfg.algorithm, self.dataset.num_clients)
        self.store = build_state_store(cfg.state, out_dir / "state")
        self.ledger = ByteLedger()
        self.device = Device(
            index=0,
            replica=replica,
            algorithm=self.algorithm,
            dataset=self.dataset,
            store=self.store,
            sizes=message_sizes(self.algorithm, replica),
            seed=cfg.seed,
            uniform_weights=cfg.algorithm.weighting == "uniform",
        )
        self.runstore = RunStore(db_path)
        self.run_id = self.runstore.start_run(
            cfg.name, "simulation", cfg.model_dump(mode="json"), rounds_planned=cfg.rounds
        )
        self.last_eval: EvalResult | None = None
        self.rounds_s = 0.0
        self.train_s = 0.0
        self.samples = 0

    def round(self, r: int) -> RoundRow:
        """Run round ``r`` (0-based) and return the row written to the run store."""
        t0 = time.perf_counter()
        cohort = sample_cohort(self.cfg.seed, r, self.dataset.num_clients, self.cfg.cohort_size)
        records = self.device.train(r, cohort, self.global_state, self.ledger)
        t_train = time.perf_counter() - t0
        sums = self.device.local_sum.segments
        self.algorithm.server_update(self.global_state, sums, self.device.replica.n_params)
        bytes_up, bytes_down = self.ledger.close_round()
        t_eval = time.perf_counter()
        evaluated = self._evaluate_if_due(r)
        t_eval = time.perf_counter() - t_eval
        samples = sum(rec.samples for rec in records)
        row = RoundRow(
            run_id=self.run_id,
            round=r,
            train_loss=sum(rec.loss for rec in records) / max(len(records), 1),
            test_accuracy=evaluated.accuracy if evaluated else None,
            test_loss=evaluated.loss if evaluated else None,
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            wall_s=time.perf_counter() - t0,
            train_s=t_train,
            samples=samples,
            clients=len(records),
        )
        self.runstore.log_round(self.run_id, row, [self._client_row(r, rec) for rec in records])
        self.train_s += t_train
        self.samples += samples
        self.rounds_s += time.perf_counter() - t0 - t_eval
        return row

    def run(self) -> Summary:
        """All rounds, then ``summary.json`` in ``out_dir``; a failure marks the run failed and re-raises."""
        try:
            with RoundProgress(self.cfg.rounds, enabled=self.cfg.progress) as progress:
                for r in range(self.cfg.rounds):
                    row = self.round(r)
                    progress.update(r + 1, self.last_eval, row.samples / max(row.train_s, 1e-9))
        except BaseException:
            self.runstore.finish_run(self.run_id, "failed", None)
            self.close()
            raise
        summary = self._summary()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
        self.runstore.finish_run(self.run_id, "finished", asdict(summary))
        self.close()
        return summary

    def close(self) -> None:
        self.store.close()
        self.runstore.close()

    def _evaluate_if_due(self, r: int) -> EvalResult | None:
        last = r == self.cfg.rounds - 1
        due = self.cfg.eval_every > 0 and (r + 1) % self.cfg.eval_every == 0
        if not (due or last):
            return None
        self.last_eval = evaluate(self.device.replica, self.global_state, self.dataset.test, self.cfg.eval_batch_size)
        return self.last_eval

    def _client_row(self, r: int, rec: ClientRecord) -> ClientRow:
        return ClientRow(self.run_id, r, rec.cid, rec.device, rec.start, rec.end, rec.samples, rec.loss)

    def _summary(self) -> Summary:
        final = self.last_eval
        return Summary(
            run_id=self.run_id,
            rounds=self.cfg.rounds,
            clients=self.dataset.num_clients,
            final_accuracy=final.accuracy if final else float("nan"),
            final_loss=final.loss if final else float("nan"),
            wall_s=time.perf_counter() - self.started,
            rounds_s=self.rounds_s,
            train_s=self.train_s,
            samples=self.samples,
            samples_per_s=self.samples / max(self.rounds_s, 1e-9),
            bytes_up=self.ledger.total_up,
            bytes_down=self.ledger.total_down,
            peak_rss_mb=peak_rss_mb(),
        )
