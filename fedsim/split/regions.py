"""Split fine-tuning across several cloud regions, each with its own edge clients; SkewScout tunes tau.

Region r serves edge clients r, r + R, r + 2R, ... (each with its own label-skewed partition) and trains its
own copy of the adapters and head; every step, every region takes one batch from its next client. Every tau
steps the regions average their trainable parameters (each uploads its adapters and downloads the mean:
``sync_bytes``). With ``control.kind: skewscout`` the regions probe before syncing: region i's adapters travel
to region j and are scored on a fixed sample of j's training sentences against j's own (``probe_bytes``);
the band policy tightens tau when the gap is above the target and loosens it after two probes below. The
deliverable is the final average, evaluated on test.tsv.

Every ``train.checkpoint_every`` steps all regions' trainers (adapters, optimiser, dropout stream) and the
controller (tau, steps since the last sync, the policy's rung and counters, the estimator's smoothed gap and
pair stream, byte counts) are saved as one checkpoint directory, swapped in by rename; ``resume`` goes on from
it and ends on the same adapters as a run never stopped.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.comm.codecs import build_codec
from fedsim.comm.ledger import FLOAT32_BYTES
from fedsim.config import ConfigError, SkewScoutControl
from fedsim.control.band import BandPolicy
from fedsim.control.estimate import TravelEstimator
from fedsim.data.sst2 import Sentences, load_sst2
from fedsim.runstore import DecisionRow, RunStore
from fedsim.sim.persist.interrupted import stoppable
from fedsim.split.config import SplitConfig
from fedsim.split.edge_side import BottomEncoder, EdgeClient, calibrate, edge_clients, encode_sentences, send
from fedsim.split.lifecycle import SplitRun
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


REGIONS = "regions"  # the checkpoint directory: r0/, r1/, ... (each a trainer's save) and progress.json


def save_regions(out: Path, trainers: list[CloudTrainer], progress: dict[str, Any]) -> None:
    """All regions and the controller as one checkpoint: staged whole, then swapped in by rename."""
    final, staged, old = out / REGIONS, out / f".{REGIONS}.tmp", out / f".{REGIONS}.old"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    for r, trainer in enumerate(trainers):
        trainer.save(staged / f"r{r}")
    (staged / "progress.json").write_text(json.dumps(progress) + "\n")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    staged.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def saved_regions(out: Path) -> Path:
    """``out/regions``, or ``out/.regions.old`` when a crash came between the two renames of a save."""
    directory = out / REGIONS
    return directory if directory.is_dir() or not (out / f".{REGIONS}.old").is_dir() else out / f".{REGIONS}.old"


def load_regions(out: Path, trainers: list[CloudTrainer]) -> dict[str, Any]:
    directory = saved_regions(out)
    progress_file = directory / "progress.json"
    if not progress_file.is_file():
        raise ConfigError(f"--resume: no regions checkpoint in {out} (no {REGIONS}/progress.json)")
    progress: dict[str, Any] = json.loads(progress_file.read_text())
    if int(progress.get("regions", -1)) != len(trainers):
        raise ConfigError(f"--resume: {out} holds {progress.get('regions')} regions; the config has {len(trainers)}")
    for r, trainer in enumerate(trainers):
        trainer.load(directory / f"r{r}", resume=True)
    return progress


def replay(regions: list[list[EdgeClient]], done: int, batch: int) -> None:
    """Draw the batches of the first ``done`` steps again without sending them, so every client's permutation is
    where it was."""
    for step in range(1, done + 1):
        for members in regions:
            members[(step - 1) % len(members)].next_indices(batch)


def run_regions(
    cfg: SplitConfig,
    out: Path,
    db: Path,
    bottom: BottomEncoder,
    trainers: list[CloudTrainer] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """``cfg.train.steps`` steps in each of ``cfg.regions`` regions; summary.json and adapters in ``out``; with
    ``resume``, from the newest checkpoint in ``out``."""
    directory = Path(cfg.data.dir)
    train = load_sst2(directory, "train", cfg.model.num_labels, cfg.data.train_limit)
    test = load_sst2(directory, "test", cfg.model.num_labels, cfg.data.test_limit)
    clients = edge_clients(cfg, train)
    regions = [clients[r :: cfg.regions] for r in range(cfg.regions)]
    codec = build_codec(cfg.codec)
    calibrate(codec, bottom, clients[0].data, cfg.calibration_sentences)  # the shared basis: a PCA, fitted once
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
    progress = load_regions(out, trainers) if resume else None
    write_config(out, cfg)

    bytes_up = sync_bytes = probe_bytes = since_sync = done = 0
    taus: list[int] = []
    t0 = time.perf_counter()
    with RunStore(db) as store, SplitRun(store, cfg, progress).ending(out) as run:
        run_id, done = run.run_id, run.done
        if progress is not None:
            tau, taus = int(progress["tau"]), progress["taus"]
            bytes_up, sync_bytes = int(progress["bytes_up"]), int(progress["sync_bytes"])
            probe_bytes, since_sync = int(progress["probe_bytes"]), int(progress["since_sync"])
            if policy is not None and estimator is not None:
                policy.load_state_dict(progress["policy"])
                estimator.load_state_dict(progress["estimator"])
            replay(regions, done, cfg.train.batch_size)
        for step in stoppable(range(done + 1, cfg.train.steps + 1)):
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
            run.log(row, rows)
            every = cfg.train.checkpoint_every
            if every and step % every == 0 and step < cfg.train.steps:
                controller = {
                    "policy": policy.state_dict() if policy is not None else None,
                    "estimator": estimator.state_dict() if estimator is not None else None,
                }
                save_regions(
                    out,
                    trainers,
                    {
                        "run_id": run_id,
                        "regions": len(trainers),
                        "step": step,
                        "tau": tau,
                        "taus": taus,
                        "since_sync": since_sync,
                        "bytes_up": bytes_up,
                        "sync_bytes": sync_bytes,
                        "probe_bytes": probe_bytes,
                        **controller,
                    },
                )
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
        run.finish(summary, out)
    return summary.as_dict()  # what summary.json holds
