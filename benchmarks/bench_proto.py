"""The protobuf codec: the ``protobuf`` runtime against the hand codec it replaced, side by side.

Times encode and decode of a 1 000-delta ``SyncResponse`` (a pull page or a broadcast) and a
1 000-delta ``SyncPush`` (a push over the WebSocket) with both codecs: ``core/proto.py`` as it is
now, and the hand-written codec of commit ``HAND_CODEC_COMMIT`` (read with ``git show`` into a
temporary module). The deltas are the gateway benchmarks' new ``orders`` rows (four columns).

Both codecs are first checked to produce the same bytes and the same deltas. Then they are timed
in interleaved rounds (each round runs every path with each codec ``--reps`` times), so that the
machine's speed drift weighs on both alike; the figure of a path is the median over the rounds
of the time per message. It prints a table (milliseconds per message, library ÷ hand) and writes
``benchmarks/results/proto.json`` (``--out``) with the runtime's backend and version.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_proto.py                  # 15 rounds of 10, ~30 s
    .venv/bin/python benchmarks/bench_proto.py --rounds 5 --deltas 100
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import google.protobuf
from google.protobuf.internal import api_implementation

from benchmarks.harness.corpus import gen_deltas
from benchmarks.harness.output import RESULTS, log, table, write_json
from benchmarks.harness.snapshot import ROOT, git_info
from lakesync_platform.core import proto

HAND_CODEC_COMMIT = "4bcbc1432bccd7555470ad13e5ea6ea6ed4f85a8"
"""The last commit whose ``core/proto.py`` is the hand-written codec."""
CLIENT = "bench-client"
SERVER_HLC = 1 << 62


def load_hand_codec(workdir: Path) -> ModuleType:
    """The hand codec of :data:`HAND_CODEC_COMMIT`, importable beside the current core."""
    source = subprocess.run(
        ["git", "show", f"{HAND_CODEC_COMMIT}:lakesync_platform/core/proto.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = workdir / "hand_proto.py"
    path.write_text(source.replace("from .", "from lakesync_platform.core."))
    spec = importlib.util.spec_from_file_location("hand_proto", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def paths(codec: Any, deltas: list[Any]) -> dict[str, Callable[[], object]]:
    """The four timed operations of ``codec`` over ``deltas``."""
    response = codec.encode_sync_response(deltas, SERVER_HLC, False)
    push = codec.encode_sync_push(CLIENT, deltas, SERVER_HLC)
    return {
        "encode SyncResponse": lambda: codec.encode_sync_response(deltas, SERVER_HLC, False),
        "decode SyncResponse": lambda: codec.decode_sync_response(response),
        "encode SyncPush": lambda: codec.encode_sync_push(CLIENT, deltas, SERVER_HLC),
        "decode SyncPush": lambda: codec.decode_sync_push(push),
    }


def check_same(hand: Any, deltas: list[Any]) -> int:
    """Both codecs agree on bytes and deltas; returns the ``SyncResponse`` size."""
    response = proto.encode_sync_response(deltas, SERVER_HLC, False)
    assert response == hand.encode_sync_response(deltas, SERVER_HLC, False)
    push = proto.encode_sync_push(CLIENT, deltas, SERVER_HLC)
    assert push == hand.encode_sync_push(CLIENT, deltas, SERVER_HLC)
    assert proto.decode_sync_response(response) == hand.decode_sync_response(response)
    assert proto.decode_sync_push(push) == hand.decode_sync_push(push)
    return len(response)


def per_message(fn: Callable[[], object], reps: int) -> float:
    """Seconds per call of ``fn`` over ``reps`` calls."""
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def main() -> None:
    """Run the comparison and report it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deltas", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS / "proto.json")
    args = parser.parse_args()

    deltas = gen_deltas((CLIENT, args.deltas, 7, True))[1]
    with tempfile.TemporaryDirectory() as tmp:
        hand = load_hand_codec(Path(tmp))
    size = check_same(hand, deltas)
    codecs = {"hand": paths(hand, deltas), "library": paths(proto, deltas)}
    backend = api_implementation.Type()
    log(f"protobuf {google.protobuf.__version__} ({backend}); {args.deltas} deltas, {size} bytes")

    times: dict[str, dict[str, list[float]]] = {c: {p: [] for p in codecs[c]} for c in codecs}
    for name in codecs:  # warm-up
        for fn in codecs[name].values():
            per_message(fn, 2)
    for r in range(args.rounds):
        for path in codecs["hand"]:
            for name in ("hand", "library") if r % 2 == 0 else ("library", "hand"):
                times[name][path].append(per_message(codecs[name][path], args.reps))
        log(f"round {r + 1}/{args.rounds}")

    rows, results = [], {}
    for path in codecs["hand"]:
        hand_ms = statistics.median(times["hand"][path]) * 1000
        lib_ms = statistics.median(times["library"][path]) * 1000
        ratio = lib_ms / hand_ms
        rows.append([path, round(hand_ms, 3), round(lib_ms, 3), f"{ratio:.2f}"])
        results[path] = {
            "hand_ms": hand_ms,
            "library_ms": lib_ms,
            "library_over_hand": ratio,
            "hand_rounds_ms": [t * 1000 for t in times["hand"][path]],
            "library_rounds_ms": [t * 1000 for t in times["library"][path]],
        }
    print(table(["path", "hand ms", "library ms", "library/hand"], rows))
    out = write_json(
        args.out,
        {
            "benchmark": "proto",
            "deltas": args.deltas,
            "sync_response_bytes": size,
            "rounds": args.rounds,
            "reps": args.reps,
            "protobuf": google.protobuf.__version__,
            "backend": backend,
            "hand_codec_commit": HAND_CODEC_COMMIT,
            "git": git_info(),
            "results": results,
        },
    )
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
