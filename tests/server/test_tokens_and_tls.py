"""Token files are checked when read; with a certificate and key the service speaks TLS only."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from transformers import BertModel

from edge.client import EdgeSession, read_token
from fedsim.config import ConfigError
from fedsim.split.trainer import CloudTrainer
from server.listen import start_server
from server.split_service import SplitService
from server.tokens import load_tokens, token_matches
from tests.split.test_trainer import make_batch
from tests.split_fixtures import split_config

ROOT = Path(__file__).resolve().parents[2]


def test_token_file_is_parsed_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text("# devices\nedge-0  aaaaaaaaaaaaaaaa  # first\n\nedge-1 bbbbbbbbbbbbbbbbbb\n")
    tokens = load_tokens(path)
    assert tokens == {"edge-0": "a" * 16, "edge-1": "b" * 18}
    assert token_matches(tokens, "edge-0", "a" * 16)
    assert not token_matches(tokens, "edge-0", "b" * 18)
    assert not token_matches(tokens, "edge-2", "\0" * 16)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("edge-0\n", ":1: expected 'device token'"),
        ("edge-0 short\n", ":1: token of 'edge-0' is shorter than 16"),
        ("a aaaaaaaaaaaaaaaa\na bbbbbbbbbbbbbbbb\n", ":2: device 'a' listed twice"),
        ("# nothing\n", "no 'device token' lines"),
    ],
)
def test_bad_token_files_are_named(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_tokens(path)


def test_device_token_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text("# mine\n  s3cret-s3cret-s3cret \n")
    assert read_token(path) == "s3cret-s3cret-s3cret"
    with pytest.raises(ConfigError, match="not found"):
        read_token(tmp_path / "missing")


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    crypto = pytest.importorskip("cryptography")
    del crypto
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.mark.slow
def test_tls_session_trains_and_plaintext_is_refused(encoder: BertModel, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    cfg = split_config(server={"address": "localhost:0", "cert": str(cert), "key": str(key)})
    tokens = {"edge-0": "token-of-edge-zero-0000"}
    service = SplitService(cfg, CloudTrainer(cfg, encoder), tokens, tmp_path, store=None)
    server, port = start_server(cfg, service)
    try:
        with EdgeSession(f"localhost:{port}", "edge-0", tokens["edge-0"], ca=cert) as edge:
            edge.open()
            assert [r.step for r in edge.train([make_batch()])] == [1]
        with EdgeSession(f"localhost:{port}", "edge-0", tokens["edge-0"]) as plain, pytest.raises(grpc.RpcError):
            plain.open(timeout=3)
    finally:
        server.stop(grace=None)


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    proto = ROOT / "fedsim" / "wire"
    (tmp_path / "fedsim" / "wire").mkdir(parents=True)
    (tmp_path / "fedsim" / "wire" / "split.proto").write_text((proto / "split.proto").read_text())
    command = [sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--pyi_out=."]
    subprocess.run([*command, "--grpc_python_out=.", "fedsim/wire/split.proto"], cwd=tmp_path, check=True)
    for name in ("split_pb2.py", "split_pb2.pyi", "split_pb2_grpc.py"):
        fresh = (tmp_path / "fedsim" / "wire" / name).read_text()
        assert fresh == (proto / name).read_text(), f"{name} is stale: run fedsim/wire/generate.sh"
