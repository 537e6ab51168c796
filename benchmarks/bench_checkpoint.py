"""Initial sync: a new Python client holds N rows from a checkpoint vs. paging the pull from zero.

    .venv/bin/python benchmarks/bench_checkpoint.py [--rows 100000] [--rounds 5] [--profile]

Set-up (timed, reported, not part of the comparison): N rows over 4 columns (string, number,
boolean, json) pushed into a fresh SQLite WAL; the pipeline's flush, state and checkpoint stages
on the local Spark (the checkpoint's generation time, chunks and bytes are reported); one gateway
process (uvicorn, auth off) serving the WAL and the checkpoint folder.

Then ``--rounds`` rounds, each with two brand-new file-backed clients over HTTP, in turn:

* **checkpoint**: ``coordinator.pull()`` on a new client = the checkpoint stream (stamped frames,
  each applied in its own transaction), then one pull from its cursor (nothing newer);
* **paging**: the same client code with a transport that offers no checkpoint: every page of
  the stamped pull from cursor 0 (1 000 rows a page, the client's default).

Each side reports wall seconds, the client process's CPU seconds and the gateway process's CPU
seconds during the run (CPU time survives a shared machine's noise better than wall time); the
medians over the rounds and the ratio paging / checkpoint are printed and written to
``benchmarks/results/checkpoint.json`` with the load average and the gateway's peak resident
memory (a checkpoint is streamed a chunk at a time, so it stays flat as N grows). ``--profile``
adds a cProfile of one more checkpoint bootstrap (client side: the top functions by cumulative
time).

Targets (issue 16): 100k rows from a checkpoint in ≤ 3 s, at least 3x faster than paging.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness.cpu import process_cpu
from benchmarks.harness.items import GW, SCHEMA, seed
from benchmarks.harness.output import RESULTS, log, write_json
from benchmarks.harness.snapshot import ROOT
from lakesync_platform.client import HttpTransport, LakeSyncClient, create_client
from lakesync_platform.pipeline.checkpoint import run_checkpoint
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog


class PagingOnly(HttpTransport):
    """The Python client's HTTP transport offering no checkpoint: it pages from zero."""

    def checkpoint(self, client_id: str | None = None) -> None:
        return None


def bootstrap(
    transport: HttpTransport, path: Path, rows: int, gateway_pid: int
) -> dict[str, float]:
    """A new client's first ``pull()``: seconds, its CPU seconds and the gateway's."""
    client: LakeSyncClient = create_client(
        name=path.stem,
        schemas=[SCHEMA],
        client_id=path.stem,
        transport=transport,
        path=path,
        auto_sync_ms=0,
    )
    try:
        gateway_cpu = process_cpu(gateway_pid)
        cpu = time.process_time()
        start = time.perf_counter()
        received = client.coordinator.pull()
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        gateway_cpu = process_cpu(gateway_pid) - gateway_cpu
        held = client.db.query_tuples("SELECT count(*) FROM items")[0][0]
        assert received == rows and held == rows, (received, held)
    finally:
        client.close()
    return {
        "wall_s": round(wall, 3),
        "client_cpu_s": round(cpu, 3),
        "gateway_cpu_s": round(gateway_cpu, 3),
    }


def profile_bootstrap(url: str, path: Path, rows: int, gateway_pid: int) -> str:
    """The top of a cProfile of one checkpoint bootstrap (client side)."""
    profiler = cProfile.Profile()
    profiler.enable()
    bootstrap(HttpTransport(url, GW, timeout_s=120), path, rows, gateway_pid)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
    return out.getvalue()


def _line(what: str, r: dict[str, float]) -> str:
    return (
        f"{what} {r['wall_s']} s (client CPU {r['client_cpu_s']} s, "
        f"gateway CPU {r['gateway_cpu_s']} s)"
    )


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (``VmHWM``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def median(rounds: list[dict[str, float]], key: str) -> float:
    return round(statistics.median(r[key] for r in rounds), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile one more bootstrap")
    parser.add_argument("--out", type=Path, default=RESULTS / "checkpoint.json")
    args = parser.parse_args()
    rows = args.rows
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        data = tmp / "data"
        data.mkdir()
        wal_url = f"sqlite:///{data / 'wal.db'}"
        wal = WriteAheadLog.open(wal_url)
        log(f"seeding {rows} rows")
        t0 = time.perf_counter()
        seed(wal, rows, register_schema=True)
        seed_s = time.perf_counter() - t0
        env = {**os.environ, "LAKESYNC_JAR_DIR": str(ROOT / "data" / "jars")}
        settings = PipelineSettings.from_env(
            env, data_dir=data, wal_url=wal_url, defs_dir=tmp / "none"
        )
        ctx = PipelineContext(settings, wal=wal)
        log("flush + state + checkpoint on the local Spark")
        t0 = time.perf_counter()
        run_flush(ctx, GW)
        run_state(ctx, GW)
        lake_s = time.perf_counter() - t0
        generated = run_checkpoint(ctx, GW)
        assert generated.written and generated.rows == rows, generated
        log(
            f"checkpoint at cursor {generated.cursor}: {generated.rows} rows, {generated.chunks} "
            f"chunks, {generated.bytes} bytes in {generated.seconds:.1f} s"
        )
        ctx.spark.stop()
        wal.close()
        gateway = GatewayProcess(
            tmp / "gw",
            "unused",
            wal_url,
            extra_args=["--no-auth", "--checkpoints", str(settings.checkpoint_root)],
            cwd=ROOT,
        )
        rounds: list[dict[str, Any]] = []
        profile = ""
        with gateway:
            assert gateway.proc is not None
            pid = gateway.proc.pid
            for n in range(args.rounds):
                ckpt = bootstrap(
                    HttpTransport(gateway.url, GW, timeout_s=120), tmp / f"ckpt{n}.db", rows, pid
                )
                paged = bootstrap(
                    PagingOnly(gateway.url, GW, timeout_s=120), tmp / f"paged{n}.db", rows, pid
                )
                rounds.append(
                    {
                        "checkpoint": ckpt,
                        "paging": paged,
                        "ratio": round(paged["wall_s"] / ckpt["wall_s"], 2),
                    }
                )
                ratio = rounds[-1]["ratio"]
                log(
                    f"round {n + 1}: {_line('checkpoint', ckpt)} | {_line('paging', paged)}"
                    f" | ratio {ratio}"
                )
            gateway_peak_mb = peak_rss_mb(pid)
            if args.profile:
                profile = profile_bootstrap(gateway.url, tmp / "profile.db", rows, pid)
    load = Path("/proc/loadavg").read_text().split()[:3]
    ck = [r["checkpoint"] for r in rounds]
    pg = [r["paging"] for r in rounds]
    summary = {
        "checkpoint_wall_s": median(ck, "wall_s"),
        "checkpoint_client_cpu_s": median(ck, "client_cpu_s"),
        "checkpoint_gateway_cpu_s": median(ck, "gateway_cpu_s"),
        "paging_wall_s": median(pg, "wall_s"),
        "paging_client_cpu_s": median(pg, "client_cpu_s"),
        "paging_gateway_cpu_s": median(pg, "gateway_cpu_s"),
        "ratio_median": round(statistics.median(r["ratio"] for r in rounds), 2),
        "ratio_range": [min(r["ratio"] for r in rounds), max(r["ratio"] for r in rounds)],
    }
    print(f"rows {rows}, {args.rounds} rounds, load average {' '.join(load)}")
    print(
        f"checkpoint: {generated.chunks} chunks, {generated.bytes} bytes, generated in "
        f"{generated.seconds:.1f} s; gateway peak RSS {gateway_peak_mb} MB"
    )
    for side in ("checkpoint", "paging"):
        middle = {k: summary[f"{side}_{k}"] for k in ("wall_s", "client_cpu_s", "gateway_cpu_s")}
        print(_line(f"{side:<10} median", middle))
    print(
        f"paging / checkpoint: median {summary['ratio_median']} (rounds {summary['ratio_range']})"
    )
    if profile:
        print(profile)
    report = {
        "rows": rows,
        "rounds": rounds,
        "summary": summary,
        "setup": {
            "seed_s": round(seed_s, 2),
            "flush_state_s": round(lake_s, 2),
            "checkpoint": {
                "cursor": generated.cursor,
                "chunks": generated.chunks,
                "bytes": generated.bytes,
                "seconds": round(generated.seconds, 2),
            },
        },
        "gateway_peak_rss_mb": gateway_peak_mb,
        "loadavg": load,
        "cpus": os.cpu_count(),
        "targets": {"checkpoint_100k_s": 3.0, "ratio_at_least": 3.0},
    }
    write_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
