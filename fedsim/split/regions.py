"""Split fine-tuning across several cloud regions, each with its own edge clients; SkewScout tunes tau.

Region r serves edge clients r, r + R, r + 2R, ... (each with its own label-skewed partition) and trains its
own copy of the adapters and head; every step, every region takes one batch from its next client. Every tau
steps the regions average their trainable parameters (each uploads its adapters and downloads the mean:
``sync_bytes``). With ``control.kind: skewscout`` the regions probe before syncing: region i's adapters travel
to region j and are scored on a fixed sample of j's training sentences against j's own (``probe_bytes``);
the band policy tightens tau when the gap is above the target and loosens it after two probes below. The
deliverable is the final average, evaluated on test.tsv.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.comm.codecs import build_codec
from fedsim.comm.ledger import FLOAT32_BYTES
from fedsim.config import SkewScoutControl
from fedsim.control.band import BandPolicy
from fedsim.control.estimate import TravelEstimator
from fedsim.data.sst2 import Sentences, load_sst2
from fedsim.runstore import DecisionRow, RunStore
from fedsim.split.config import SplitConfig
from fedsim.split.edge_side import BottomEncoder, EdgeClient, edge_clients, encode_sentences, send
from fedsim.split.simulate import evaluate, write_config
from fedsim.split.step import split_step, step_row
from fedsim.split.summary import SplitSummary
from fedsim.split.trainer import CloudTrainer
from fedsim.wire.batch import WireBatch


@torch.no_grad()
def average(trainers: list[CloudTrainer]) -> None:
    """Every region's trainable parameters become their mean (the optimiser states stay per region)."""
    for tensors in zip(*(t.trainable for t in trainers), strict=True):
        mean = torch.stack(tensors).mean(0)
        for t in tensors:
            t.copy_(mean)


def region_sample(clients: list[EdgeClient], size: int, seed: int) -> Sentences:
    """A fixed sample of the region's training sentences, drawn across its clients."""
    texts: list[str] = []
    labels: list[np.ndarray] = []
    rng = np.random.default_rng([seed, 0x9E6])
    for client in clients:
        take = rng.permutation(len(client.data))[: max(1, size // len(clients))]
        part = client.data.take(take)
        texts += part.texts
        labels.append(part.labels)
    return Sentences(texts, np.concatenate(labels))


def run_regions(
    cfg: SplitConfig, out: Path, db: Path, bottom: BottomEncoder, trainers: list[CloudTrainer] | None = None
) -> dict[str, Any]:
    """``cfg.train.steps`` steps in each of ``cfg.regions`` regions; summary.json and adapters in ``out``."""
    directory = Path(cfg.data.dir)
    train = load_sst2(directory, "train", cfg.model.num_labels, cfg.data.train_limit)
    test = load_sst2(directory, "test", cfg.model.num_labels, cfg.data.test_limit)
    clients = edge_clients(cfg, train)
    regions = [clients[r :: cfg.regions] for r in range(cfg.regions)]
    codec = build_codec(cfg.codec)
    trainers = trainers if trainers is not None else [CloudTrainer(cfg) for _ in range(cfg.regions)]
    adapter_bytes = FLOAT32_BYTES * trainers[0].trainable_params  # one upload or download of the adapters
    control = cfg.control
    knob = control.knob
    tau = int(knob.rungs[knob.start_rung]) if knob is not None else 1
    policy = estimator = None
    samples: list[WireBatch] = []
    probe_every = 0
    if isinstance(control, SkewScoutControl):
        probe_every = control.probe_every
        policy = BandPolicy(control.knob.rungs, *control.target, start=control.knob.start_rung)
        estimator = TravelEstimator(cfg.regions, control.pairs, control.smoothing, cfg.seed)
        samples = [send(bottom, codec, region_sample(r, control.sample, cfg.seed), False).wire for r in regions]
    write_config(out, cfg)

    bytes_up = sync_bytes = probe_bytes = since_sync = 0
    taus: list[int] = []
    t0 = time.perf_counter()
    with RunStore(db) as store:
        run_id = store.start_run(cfg.name, "split", cfg.model_dump(mode="json"), cfg.train.steps)
        try:
            for step in range(1, cfg.train.steps + 1):
                records = []
                for r, (trainer, members) in enumerate(zip(trainers, regions, strict=True)):
                    client = members[(step - 1) % len(members)]
                    began = time.time()  # the regions take turns: each client row gets its own interval
                    sent = send(bottom, codec, client.data.take(client.next_indices(cfg.train.batch_size)), False)
                    records.append(split_step(trainer, sent.wire, client.index, region=r, start=began))
                step_bytes = sum(rec.bytes_sent for rec in records)
                bytes_up += step_bytes
                since_sync += 1
                taus.append(tau)
                probe_moved = 0
                if policy is not None and estimator is not None and step % probe_every == 0:
                    estimate, gaps = estimator.probe(lambda i, j: trainers[i].evaluate(samples[j]).accuracy)
                    decision = policy.decide(estimate)
                    probe_moved = 2 * adapter_bytes * len(gaps)
                    probe_bytes += probe_moved
                    gaps_json = json.dumps([[i, j, round(g, 3)] for i, j, g in gaps])
                    store.log_decision(
                        DecisionRow(
                            run_id,
                            step,
                            "tau",
                            estimate,
                            decision.old,
                            decision.new,
                            decision.action,
                            probe_moved,
                            gaps_json,
                        )
                    )
                    tau = int(decision.new)
                synced = 0
                if since_sync >= tau and len(trainers) > 1:
                    average(trainers)
                    synced = 2 * adapter_bytes * len(trainers)
                    sync_bytes += synced
                    since_sync = 0
                extra = {"tau": taus[-1], "sync_bytes": synced, "probe_bytes": probe_moved}
                row, rows = step_row(
                    run_id, step, records, time.perf_counter() - t0, extra_bytes=synced + probe_moved, extra=extra
                )
                store.log_round(run_id, row, rows)
            if since_sync and len(trainers) > 1:  # the deliverable is one model: every region uploads once more
                average(trainers)
                sync_bytes += adapter_bytes * len(trainers)
            final = evaluate(trainers[0], encode_sentences(bottom, codec, test, cfg.train.eval_batch_size))
            adapters = trainers[0].save(out)
            summary = SplitSummary(
                run_id=run_id,
                regions=cfg.regions,
                codec=codec.spec,
                test_accuracy=final.accuracy,
                test_loss=final.loss,
                steps=cfg.train.steps,
                bytes_up=bytes_up,
                sync_bytes=sync_bytes,
                probe_bytes=probe_bytes,
                tau_first=taus[0],
                tau_last=taus[-1],
                tau_mean=float(np.mean(taus)),
                wall_s=time.perf_counter() - t0,
                adapters=str(adapters),
            )
            summary.write(out)
            store.finish_run(run_id, "finished", summary.as_dict())
        except BaseException:
            store.finish_run(run_id, "failed", None)
            raise
    return summary.as_dict()  # what summary.json holds
