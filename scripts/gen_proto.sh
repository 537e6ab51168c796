#!/usr/bin/env bash
# Regenerate the protobuf classes (lakesync_v1_pb2.py, lakesync_platform_v1_pb2.py and their .pyi
# stubs) from the .proto files of lakesync_platform/core/_pb with protoc from grpcio-tools (a dev
# dependency).
# Usage: scripts/gen_proto.sh [OUTPUT_DIR]   (default: beside the .proto; PYTHON picks the
# interpreter, default .venv/bin/python). tests/core/test_proto.py checks the
# checked-in files are what this produces.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=lakesync_platform/core/_pb
OUT="${1:-$SRC}"
"${PYTHON:-.venv/bin/python}" -m grpc_tools.protoc -I "$SRC" --python_out="$OUT" --pyi_out="$OUT" \
    "$SRC/lakesync_v1.proto" "$SRC/lakesync_platform_v1.proto"
