"""One split step: ``run_split``, ``run_regions`` and the gRPC service record the same batch the same way."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from transformers import BertModel

from edge.client import EdgeSession
from edge.onnx_bottom import EdgeEncoder
from fedsim.comm.codecs import build_codec
from fedsim.data.sst2 import load_sst2
from fedsim.runstore import ClientRow, RoundRow, RunStore
from fedsim.split.config import SplitConfig
from fedsim.split.edge_side import edge_clients, send
from fedsim.split.model import minilm_path
from fedsim.split.regions import run_regions
from fedsim.split.simulate import run_split
from fedsim.split.trainer import CloudTrainer
from fedsim.wire.batch import WireBatch
from server.listen import start_server
from server.split_service import SplitService
from tests.split_fixtures import split_config

# what every runtime records for a batch; each adds its own (reconstruction error, tau, device name)
COMMON = ("codec", "activation_bytes", "bytes_uncompressed", "client")


def _rows(db: Path) -> tuple[RoundRow, ClientRow]:
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        (row,) = store.rounds(run.run_id)
        (client,) = store.client_runs(run.run_id)
    return row, client


def _seen(row: RoundRow, client: ClientRow) -> tuple[Any, ...]:
    metrics = json.loads(row.metrics_json)
    return (
        row.round,
        row.train_loss,
        row.bytes_up,
        row.bytes_down,
        row.samples,
        row.clients,
        {k: metrics[k] for k in COMMON},
        (client.round, client.client, client.device, client.samples, client.loss),
    )


def _first_batch(cfg: SplitConfig, edge: EdgeEncoder) -> WireBatch:
    """The batch edge client 0 sends first, as the simulation draws it."""
    client = edge_clients(cfg, load_sst2(Path(cfg.data.dir), "train"))[0]
    return send(edge, build_codec(cfg.codec), client.data.take(client.next_indices(cfg.train.batch_size)), False).wire


@pytest.mark.parametrize("codec", ["fp32", "lowrank-int8:4"])
def test_the_three_runtimes_write_the_same_row_for_the_same_batch(
    codec: str, pretrained: BertModel, onnx_bottom: Path, sst2_dir: Path, tmp_path: Path
) -> None:
    cfg = split_config(
        codec=codec,
        data={"dir": str(sst2_dir), "clients": 1},
        train={"steps": 1},
        server={"address": "127.0.0.1:0"},
    )
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)

    def trainer() -> CloudTrainer:
        return CloudTrainer(cfg, copy.deepcopy(pretrained))

    run_split(cfg, tmp_path / "split", tmp_path / "split.db", edge, trainer())
    run_regions(cfg, tmp_path / "regions", tmp_path / "regions.db", edge, [trainer()])

    with RunStore(tmp_path / "serve.db") as store:
        service = SplitService(cfg, trainer(), {"edge-0": "t" * 16}, tmp_path / "serve", store)
        server, port = start_server(cfg, service)
        try:
            with EdgeSession(f"127.0.0.1:{port}", "edge-0", "t" * 16) as session:
                session.open()
                (reply,) = session.train([_first_batch(cfg, edge)])
        finally:
            server.stop(grace=None)

    split, regions, served = (_seen(*_rows(tmp_path / f"{name}.db")) for name in ("split", "regions", "serve"))
    assert split == regions == served
    assert split[0] == 1 and split[1] == pytest.approx(reply.loss)
    assert split[6]["codec"] == codec and split[6]["bytes_uncompressed"] > split[6]["activation_bytes"]
