"""A flush killed with SIGKILL mid-write, then re-run: nothing lost or doubled.

Twice: with the run's own in-process driver (the kill stops the write: the re-run writes the
whole range) and as a client of the suite's Spark Connect server (the server may finish the
killed client's commit: the re-run then finds the range in the lake, or loses its commit to
that one and plans again, and writes the rest — none of it twice)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.spark.flush import flush_gateway
from lakesync_platform.spark.layout import deltas_table
from lakesync_platform.spark.wal_source import jdbc_source
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ENTRIES = 150_000


def _fill(path: Path, gw: str) -> None:
    """Append ``ENTRIES`` log entries straight into the WAL's table (fast set-up)."""
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op, client_id, "
            "hlc, columns, ingest_ms, size) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                (
                    gw,
                    c,
                    f"d{c}",
                    "todos",
                    f"r{c % 5000}",
                    "UPDATE",
                    "a",
                    c << 16,
                    f'[{{"column":"title","value":"t{c}"}}]',
                    1_700_000_000_000 + c,
                    80,
                )
                for c in range(1, ENTRIES + 1)
            ),
        )
        conn.execute(
            "INSERT INTO wal_gateways (gateway_id, last_cursor, appended_bytes, flush_watermark, "
            "flushed_bytes, created_ms) VALUES (?, ?, ?, 0, 0, 0)",
            (gw, ENTRIES, ENTRIES * 80),
        )
    conn.close()


@pytest.mark.parametrize("driver", ["in-process", "connect"])
def test_flush_killed_mid_write_then_rerun(
    spark: Any, spark_server: str | None, lake_catalog: Any, lake_dir: Path, tmp_path: Path,
    gw: str, driver: str,
) -> None:  # fmt: skip
    if driver == "connect" and spark_server is None:
        pytest.skip("needs the suite's Spark Connect server")
    remote = "local" if driver == "in-process" else spark_server
    wal_path = tmp_path / "wal.db"
    url = "sqlite:///" + str(wal_path)
    WriteAheadLog.open(url).close()
    _fill(wal_path, gw)
    data_files = lake_dir / "warehouse" / gw / "lakesync_deltas" / "data"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lakesync_platform.cli",
            "run",
            "flush",
            "--gw",
            gw,
            "--data-dir",
            str(lake_dir),
            "--defs",
            str(tmp_path / "no-defs"),
            "--wal-url",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # The suite's jars; its server, or a driver of the run's own.
        env={
            **os.environ,
            "LAKESYNC_JAR_DIR": str(REPO / "data" / "jars"),
            "LAKESYNC_SPARK_REMOTE": str(remote),
        },
        start_new_session=True,
    )
    killed_while_writing = False
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if data_files.exists() and any(data_files.rglob("*.parquet")):
                os.killpg(proc.pid, signal.SIGKILL)  # files being written, commit not done
                killed_while_writing = True
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    wal = WriteAheadLog.open(url)
    try:
        result = flush_gateway(spark, lake_catalog, wal, jdbc_source(url), gw)
        cursors = spark.table(deltas_table(gw)).groupBy().agg({"cursor": "count"}).collect()[0][0]
        distinct = spark.table(deltas_table(gw)).select("cursor").distinct().count()
        assert cursors == distinct == ENTRIES
        assert wal.flush_watermark(gw) == ENTRIES
        if killed_while_writing and driver == "in-process":
            # The killed run never committed: the re-run wrote the whole range.
            assert result.entries == ENTRIES
    finally:
        wal.close()
    assert killed_while_writing, "the flush finished before it could be killed mid-write"
