"""Flush is exactly once: crashes between commit and watermark, concurrent flushes, pyiceberg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from lakesync_platform.core.errors import FlushError
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.spark.flush import (
    FlushResult,
    commit_flush,
    flush_gateway,
    lake_watermark,
    plan_flush,
)
from lakesync_platform.spark.layout import DELTAS_TABLE, deltas_table
from lakesync_platform.spark.session import pyiceberg_catalog
from lakesync_platform.spark.snapshots import ancestors, current_snapshot
from lakesync_platform.spark.state import update_state
from lakesync_platform.spark.wal_source import jdbc_source
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher

pytestmark = pytest.mark.spark


class Crash(Exception):
    """Stands for the process dying between the Iceberg commit and the watermark update."""


def _lake_cursors(spark: Any, gw: str) -> list[int]:
    return sorted(r["cursor"] for r in spark.table(deltas_table(gw)).select("cursor").collect())


def test_crash_after_commit_then_rerun_is_exactly_once(
    spark: Any, lake_catalog: Any, wal: WriteAheadLog, wal_url: str, gw: str, pusher: Pusher
) -> None:
    source = jdbc_source(wal_url)
    for i in range(5):
        pusher.write("a", f"r{i}", title=str(i))

    def crash(_: FlushResult) -> None:
        raise Crash

    with pytest.raises(Crash):
        flush_gateway(spark, lake_catalog, wal, source, gw, after_commit=crash)
    assert _lake_cursors(spark, gw) == [1, 2, 3, 4, 5]
    assert wal.flush_watermark(gw) == 0  # the WAL never heard of the commit
    for i in range(5, 8):
        pusher.write("b", f"r{i}", title=str(i))
    result = flush_gateway(spark, lake_catalog, wal, source, gw)
    assert (result.from_cursor, result.to_cursor, result.entries) == (6, 8, 3)
    assert _lake_cursors(spark, gw) == list(range(1, 9))
    assert wal.flush_watermark(gw) == 8
    again = flush_gateway(spark, lake_catalog, wal, source, gw)
    assert again.empty and _lake_cursors(spark, gw) == list(range(1, 9))


def test_concurrent_flush_from_the_same_watermark_fails_instead_of_duplicating(
    spark: Any, lake_catalog: Any, wal: WriteAheadLog, wal_url: str, gw: str, pusher: Pusher
) -> None:
    source = jdbc_source(wal_url)
    pusher.write("a", "r1", title="x")
    flush_gateway(spark, lake_catalog, wal, source, gw)
    pusher.write("a", "r2", title="y")
    first = plan_flush(spark, lake_catalog, wal, gw)
    second = plan_flush(spark, lake_catalog, wal, gw)  # both read the same lake watermark
    assert commit_flush(spark, lake_catalog, wal, source, first).entries == 1
    with pytest.raises(FlushError):
        commit_flush(spark, lake_catalog, wal, source, second)
    assert _lake_cursors(spark, gw) == [1, 2]
    assert flush_gateway(spark, lake_catalog, wal, source, gw).empty


def test_pyiceberg_reads_every_table_spark_writes(
    spark: Any,
    lake_catalog: Any,
    spark_settings: Any,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
) -> None:
    pusher.write("a", "r1", title="one", done=True, meta={"x": 1})
    pusher.write("a", "r2", title="two")
    flush_gateway(spark, lake_catalog, wal, jdbc_source(wal_url), gw)
    update_state(spark, lake_catalog, gw, todos)
    pusher.write("b", "r1", title="uno")  # a second MERGE: merge-on-read position deletes
    pusher.delete("b", "r2")
    flush_gateway(spark, lake_catalog, wal, jdbc_source(wal_url), gw)
    update_state(spark, lake_catalog, gw, todos)
    catalog = pyiceberg_catalog(spark_settings)
    log = catalog.load_table(f"{gw}.{DELTAS_TABLE}").scan().to_arrow()  # type: ignore[attr-defined]
    assert sorted(log.column("cursor").to_pylist()) == [1, 2, 3, 4]
    summary = catalog.load_table(f"{gw}.{DELTAS_TABLE}").current_snapshot().summary  # type: ignore[attr-defined]
    assert summary["lakesync.wal.to"] == "4"
    state = catalog.load_table(f"{gw}.todos").scan().to_arrow().to_pylist()  # type: ignore[attr-defined]
    by_id = {r["row_id"]: r for r in state}
    assert by_id["r1"]["title"] == "uno" and by_id["r1"]["done"] is True
    assert by_id["r2"]["_ls$live"] is False
    assert len(state) == 2
    for name in (DELTAS_TABLE, "todos"):
        table = catalog.load_table(f"{gw}.{name}")  # type: ignore[attr-defined]
        props = table.properties
        assert props["write.parquet.compression-codec"] == "zstd", name
        assert props["write.parquet.compression-level"] == "1", name
        files = [task.file.file_path for task in table.scan().plan_files()]
        assert files
        for path in files:
            meta = pq.ParquetFile(path.removeprefix("file:")).metadata
            assert meta.row_group(0).column(0).compression == "ZSTD", path


def test_jdbc_source_urls(tmp_path: Path) -> None:
    assert jdbc_source("sqlite:////x/wal.db").url == "jdbc:sqlite:/x/wal.db"
    pg = jdbc_source("postgresql+psycopg://u:p@h:5433/db")
    assert (pg.url, pg.user, pg.password) == ("jdbc:postgresql://h:5433/db", "u", "p")


def test_snapshot_reader_returns_the_summaries_spark_sees_of_the_lineage(
    spark: Any, lake_catalog: Any, wal: WriteAheadLog, wal_url: str, gw: str, pusher: Pusher
) -> None:
    source = jdbc_source(wal_url)
    pusher.write("a", "r1", title="x")
    flush_gateway(spark, lake_catalog, wal, source, gw)
    pusher.write("a", "r2", title="y")
    flush_gateway(spark, lake_catalog, wal, source, gw)
    name = deltas_table(gw)
    rows = spark.sql(f"SELECT snapshot_id, summary FROM {name}.snapshots").collect()
    seen = {
        int(r["snapshot_id"]): {k: v for k, v in r["summary"].items() if k != "operation"}
        for r in rows
    }
    ours = [(s.snapshot_id, s.summary) for s in ancestors(lake_catalog, name)]
    assert len(ours) == 2 and dict(ours) == seen
    assert [summary["lakesync.wal.to"] for _, summary in ours] == ["2", "1"]
    current = current_snapshot(lake_catalog, name)
    assert current is not None and (current.snapshot_id, current.summary) == ours[0]
    # Without a catalog the watermark is read through Spark's metadata tables: the same.
    assert lake_watermark(spark, gw) == lake_watermark(spark, gw, lake_catalog)
    assert "operation" not in current.summary and current.int_prop("added-records") == 1
