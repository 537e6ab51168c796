"""Pipeline jobs started together as real processes on one lake: each waits for the other's
stage, none fails, every WAL entry lands once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import check_log_exactly_once
from lakesync_platform.pipeline.state import check_state_matches_log, run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.layout import deltas_table
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import TODOS, Pusher

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _fill(wal: WriteAheadLog, pusher: Pusher, gw: str, rows: int) -> None:
    """``rows`` writes to ``todos`` then a delete of every tenth row, pushed in batches."""
    wal.save_schema(gw, TODOS)
    pusher.gw = gw
    writes = [pusher.delta("a", f"r{i}", pusher.hlc(), title=f"t{i}") for i in range(rows)]
    deletes = [pusher.delta("b", f"r{i}", pusher.hlc(), op="DELETE") for i in range(0, rows, 10)]
    for start in range(0, len(writes), 500):
        pusher.push("a", writes[start : start + 500])
    pusher.push("b", deletes)


def test_concurrent_runs_wait_for_each_other_and_land_every_entry_once(
    spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, pusher: Pusher, gw: str
) -> None:
    one, two = f"{gw}_one", f"{gw}_two"
    _fill(wal, pusher, one, 1_000)
    _fill(wal, pusher, two, 2_000)
    base = [sys.executable, "-m", "lakesync_platform.cli", "run"]
    where = ["--data-dir", str(lake_dir), "--defs", str(lake_dir / "no-defs"), "--wal-url", wal_url]
    # Both gateways' flushes in one process, the second gateway's flush in another: the same
    # stage of one gateway, and different gateways, on the one SQLite catalog (a state run takes
    # the same lock: test_lock.py).
    procs = [
        subprocess.Popen(
            [*base, *args, *where],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in (["flush"], ["flush", "--gw", two])
    ]
    outputs = [proc.communicate(timeout=240) for proc in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        # The terminal shows our lines only: the JVM's log is in the data directory.
        assert "WARN" not in err and "log4j" not in err and "Exception" not in err, err
    flushed = outputs[0][0] + outputs[1][0]
    assert f"flush {one}: 1 100 entries, WAL 1..1 100" in flushed
    # The second gateway's range is flushed once, by whichever run took the lock first; the
    # other found nothing new.
    assert flushed.count(f"flush {two}: 2 200 entries, WAL 1..2 200") == 1
    assert flushed.count(f"flush {two}: nothing new (the lake holds WAL ..2 200)") == 1
    ctx = PipelineContext(
        PipelineSettings(data_dir=lake_dir, wal_url=wal_url, defs_dir=lake_dir / "no-defs"),
        spark=spark,
        wal=wal,
    )
    for g, entries in ((one, 1_100), (two, 2_200)):
        check = check_log_exactly_once(ctx, g)
        assert check.passed, check.description
        assert check.metadata["watermark"] == entries == check.metadata["lake_rows"]
        assert spark.table(deltas_table(g)).count() == entries
        assert wal.flush_watermark(g) == entries
    run_state(ctx, one)
    check = check_state_matches_log(ctx, one, "todos")
    assert check.passed and check.metadata["state_cursor"] == 1_100, check.description
