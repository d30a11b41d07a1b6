#!/usr/bin/env bash
# Regenerate split_pb2.py, split_pb2.pyi and split_pb2_grpc.py from split.proto (needs grpcio-tools).
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. fedsim/wire/split.proto
