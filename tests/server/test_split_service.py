"""The split gRPC service over a real channel: tokens, each malformed batch, message limits, checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from transformers import BertModel

from edge.client import EdgeSession
from fedsim.split.trainer import CloudTrainer
from fedsim.wire import split_pb2, split_pb2_grpc
from fedsim.wire.messages import to_message
from server.listen import start_server
from server.split_service import SplitService
from tests.split.test_trainer import HIDDEN, MALFORMED, _bad, assert_unchanged, make_batch, snapshot
from tests.split_fixtures import split_config

TOKENS = {"edge-0": "token-of-edge-zero-0000", "edge-1": "token-of-edge-one-11111"}


@dataclasses.dataclass
class Cloud:
    service: SplitService
    address: str
    out: Path


@pytest.fixture
def cloud(encoder: BertModel, tmp_path: Path) -> Iterator[Cloud]:
    cfg = split_config(
        server={"address": "127.0.0.1:0", "max_message_mb": 16, "max_tokens": 4096}, train={"checkpoint_every": 3}
    )
    service = SplitService(cfg, CloudTrainer(cfg, encoder), TOKENS, tmp_path, store=None)
    server, port = start_server(cfg, service)
    yield Cloud(service, f"127.0.0.1:{port}", tmp_path)
    server.stop(grace=None)


def session(cloud: Cloud, device: str = "edge-0", token: str | None = None) -> EdgeSession:
    edge = EdgeSession(cloud.address, device, TOKENS.get(device, "x") if token is None else token, 16)
    edge.open()
    return edge


def test_session_describes_the_split(cloud: Cloud) -> None:
    opened = session(cloud).session
    assert opened is not None
    assert (opened.split_layer, opened.hidden_size, opened.num_labels, opened.max_length) == (5, HIDDEN, 2, 16)
    assert opened.max_message_bytes == 16 * 2**20


@pytest.mark.parametrize(("device", "token"), [("edge-0", "token-of-edge-one-11111"), ("edge-9", "whatever"), ("", "")])
def test_wrong_token_or_device_is_unauthenticated(cloud: Cloud, device: str, token: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        session(cloud, device, token)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "unknown device or wrong token" in (err.value.details() or "")


@pytest.mark.parametrize("metadata", [(), (("fedsim-session", "forged"),)])
def test_calls_without_a_valid_session_are_unauthenticated(cloud: Cloud, metadata: tuple[tuple[str, str], ...]) -> None:
    with grpc.insecure_channel(cloud.address) as channel:
        stub = split_pb2_grpc.SplitTrainerStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Train(iter([to_message(make_batch())]), metadata=metadata))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as err:
            stub.Status(split_pb2.StatusRequest(), metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert cloud.service.trainer.step == 0


@pytest.mark.parametrize("name", list(MALFORMED))
def test_each_malformed_batch_is_invalid_argument_and_trains_nothing(cloud: Cloud, name: str) -> None:
    edge, other = session(cloud), session(cloud, "edge-1")
    assert [r.step for r in edge.train([make_batch()])] == [1]
    before = snapshot(cloud.service.trainer)
    with pytest.raises(grpc.RpcError) as err:
        list(edge.train([_bad(make_batch(seed=1), name)]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert MALFORMED[name] in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        edge.evaluate([_bad(make_batch(seed=1), name)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert_unchanged(cloud.service.trainer, before)
    # the other device, and the same device on a new stream, go on
    assert [r.step for r in other.train([make_batch(seed=2)])] == [2]
    assert [r.step for r in edge.train([make_batch(seed=3)])] == [3]
    status = other.status()
    assert {d.device: d.rejected for d in status.devices} == {"edge-0": 2, "edge-1": 0}


def test_a_bad_shape_rank_is_invalid_argument(cloud: Cloud) -> None:
    edge = session(cloud)
    message = to_message(make_batch())
    del message.shape[:]
    message.shape.extend([1, 2, 3, 4])
    with pytest.raises(grpc.RpcError) as err:
        list(edge.stub.Train(iter([message]), metadata=(("fedsim-session", edge.session.session_id),)))  # type: ignore[union-attr]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a tensor shape" in (err.value.details() or "")


def test_an_fp32_batch_above_the_4_mib_default_goes_through(cloud: Cloud) -> None:
    batch = make_batch(lengths=(16,) * 200)  # 200 * 16 * 384 * 4 bytes = 4.7 MiB
    assert len(batch.payload) > 4 * 2**20
    (reply,) = session(cloud).train([batch])
    assert reply.examples == 200


def test_train_streams_learn_evaluate_and_checkpoint(cloud: Cloud) -> None:
    edge = session(cloud)
    replies = list(edge.train([make_batch()] * 6))
    assert [r.step for r in replies] == [1, 2, 3, 4, 5, 6]
    assert replies[-1].loss < replies[0].loss
    result = edge.evaluate([make_batch(), make_batch(seed=4)])
    assert result.examples == 8 and result.accuracy == pytest.approx(result.correct / 8)
    assert (cloud.out / "adapters" / "adapter_model.safetensors").is_file()
    status = edge.status()
    assert status.step == 6 and status.checkpoints == 2
    (device,) = status.devices
    assert device.batches == 6 and device.examples == 24
    assert device.bytes_received == 6 * make_batch().nbytes
    assert np.isclose(device.last_loss, replies[-1].loss)


def test_a_restarted_service_resumes_its_run(pretrained: BertModel, tmp_path: Path) -> None:
    import copy

    from fedsim.runstore import RunStore

    cfg = split_config(server={"address": "127.0.0.1:0", "max_message_mb": 16}, train={"checkpoint_every": 3})
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        first = SplitService(cfg, CloudTrainer(cfg, copy.deepcopy(pretrained)), TOKENS, tmp_path, store)
        server, port = start_server(cfg, first)
        edge = EdgeSession(f"127.0.0.1:{port}", "edge-0", TOKENS["edge-0"], 16)
        edge.open()
        assert [r.step for r in edge.train([make_batch(seed=k) for k in range(4)])] == [1, 2, 3, 4]
        server.stop(grace=None)
        first.checkpoint()  # what fedsim serve does on SIGTERM
        saved = snapshot(first.trainer)

    with RunStore(db) as store:
        again = SplitService(cfg, CloudTrainer(cfg, copy.deepcopy(pretrained)), TOKENS, tmp_path, store, resume=True)
        assert again.run_id == first.run_id and again.trainer.step == 4
        assert_unchanged(again.trainer, saved)
        server, port = start_server(cfg, again)
        edge = EdgeSession(f"127.0.0.1:{port}", "edge-0", TOKENS["edge-0"], 16)
        edge.open()
        assert [r.step for r in edge.train([make_batch(seed=9)])] == [5]
        status = edge.status()
        assert status.devices[0].batches == 5  # the device's counts go on too
        server.stop(grace=None)
        (run,) = store.list_runs()
        assert run.status == "resumed" and [r.round for r in store.rounds(run.run_id)] == [1, 2, 3, 4, 5]


def test_checkpoints_taken_while_two_devices_train_resume_to_rows_and_adapters_that_agree(
    pretrained: BertModel, tmp_path: Path
) -> None:
    import copy
    import time
    from concurrent.futures import ThreadPoolExecutor

    from fedsim.runstore import RunStore

    cfg = split_config(server={"address": "127.0.0.1:0", "max_message_mb": 16}, train={"checkpoint_every": 1})
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        service = SplitService(cfg, CloudTrainer(cfg, copy.deepcopy(pretrained)), TOKENS, tmp_path, store)
        trainer, save = service.trainer, service.trainer.save
        saved: list[tuple[int, int, int, int]] = []  # progress step and examples against the trainer's own

        def slow_save(out: Path, progress: dict[str, object] | None = None) -> Path:
            time.sleep(0.05)  # a save takes a while: another device's step must not land inside it
            if progress is not None:
                devices = progress["devices"]
                assert isinstance(devices, dict)
                examples = sum(d["examples"] for d in devices.values())
                saved.append((int(progress["step"]), trainer.step, examples, trainer.examples))  # type: ignore[call-overload]
            return save(out, progress)

        trainer.save = slow_save  # type: ignore[method-assign]
        server, port = start_server(cfg, service)

        def train(device: str, seed: int) -> list[int]:
            edge = EdgeSession(f"127.0.0.1:{port}", device, TOKENS[device], 16)
            edge.open()
            return [r.step for r in edge.train([make_batch(seed=seed + k) for k in range(6)])]

        with ThreadPoolExecutor(2) as pool:
            steps = list(pool.map(train, ["edge-0", "edge-1"], [0, 100]))
        server.stop(grace=None)
    assert sorted(steps[0] + steps[1]) == list(range(1, 13)) and len(saved) == 12
    for step, trainer_step, examples, trainer_examples in saved:
        assert (step, examples) == (trainer_step, trainer_examples), "a step landed between progress and save"

    with RunStore(db) as store:
        again = SplitService(cfg, CloudTrainer(cfg, copy.deepcopy(pretrained)), TOKENS, tmp_path, store, resume=True)
        rows = store.rounds(again.run_id)
        status = {name: stats.examples for name, stats in again._stats.items()}
    assert again.trainer.step == 12 and [r.round for r in rows] == list(range(1, 13))
    assert sum(r.samples or 0 for r in rows) == again.trainer.examples == sum(status.values()) == 12 * 4
    assert_unchanged(again.trainer, snapshot(service.trainer))  # the adapters of the last step, resumed
