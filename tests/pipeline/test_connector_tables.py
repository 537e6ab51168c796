"""The connectors' own lake tables on the real local Spark: the ``diff`` snapshot and the
census's known ids are swapped in by catalog operations, recovered at every crash point, and
keep the warehouse bounded however many runs there were."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from lakesync_platform.connectors.model import Page
from lakesync_platform.connectors.runner import run_streams
from lakesync_platform.core.connectors import parse_connector_config
from lakesync_platform.core.errors import FlushError
from lakesync_platform.pipeline.connectors import DiffStream, run_connector
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.upkeep import lake_tables
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.connector_census import KNOWN_THROUGH, IdCensus, known_ids_table
from lakesync_platform.spark.connector_diff import SnapshotDiff
from lakesync_platform.spark.layout import table_exists
from lakesync_platform.spark.snapshots import load_table
from lakesync_platform.spark.staged import GENERATIONS
from lakesync_platform.spark.wal_source import default_parallelism, jdbc_source
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import NOW_MS

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def ctx(spark: Any, wal: WriteAheadLog, tmp_path: Path) -> PipelineContext:
    settings = PipelineSettings(data_dir=tmp_path, defs_dir=tmp_path / "defs", env={})
    return PipelineContext(settings, spark=spark, wal=wal)


@pytest.fixture
def source(postgres_url: str) -> Iterator[sqlalchemy.Engine]:
    engine = sqlalchemy.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE items (id INT PRIMARY KEY, name TEXT, price INT)")
        conn.exec_driver_sql(
            "INSERT INTO items SELECT i, 'item ' || i, i FROM generate_series(1, 6) i"
        )
    yield engine
    engine.dispose()


def _sql(engine: sqlalchemy.Engine, *statements: str) -> None:
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)


def _register(wal: WriteAheadLog, gw: str, url: str) -> None:
    body = {
        "name": "shop",
        "type": "postgres",
        "postgres": {"connectionString": url},
        "ingest": {"tables": [{"table": "items", "strategy": {"type": "diff"}}]},
    }
    wal.save_connector(gw, parse_connector_config(body))


def _wal_rows(wal: WriteAheadLog, gw: str) -> dict[str, Mapping[str, Any]]:
    service = SyncService(wal, lambda: NOW_MS)
    return {k: s.values() for k, s in service.known_rows(gw, "items").items() if s.live}


def _source_rows(engine: sqlalchemy.Engine) -> dict[str, Mapping[str, Any]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT id, name, price FROM items").all()
    return {str(i): {"name": name, "price": price} for i, name, price in rows}


def _warehouse(lake_dir: Path, gw: str) -> tuple[int, int, set[str]]:
    """Files and bytes under the gateway's folder, and the folders directly in it."""
    folder = lake_dir / "warehouse" / gw
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files), {p.name for p in folder.iterdir()}


class _Killed(Exception):
    """The kill of a run, at a chosen point."""


@dataclasses.dataclass
class _KilledRun:
    """A diff stream whose run is killed after its first ``pages`` pages were committed
    (``None``: after its last commit), before the promote."""

    inner: DiffStream
    pages_before_kill: int | None = None
    name: str = "items"
    table: str = "items"

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        for n, page in enumerate(self.inner.pages(state)):
            if n == self.pages_before_kill:  # the pages before this one are committed
                raise _Killed
            yield dataclasses.replace(page, after_commit=None)


def _killed_run(
    ctx: PipelineContext,
    gw: str,
    url: str,
    clock: Callable[[], int],
    pages_before_kill: int | None = None,
) -> tuple[SnapshotDiff, dict[str, int]]:
    """A diff run of ``shop.items`` killed before its promote — after its last commit, or
    after ``pages_before_kill`` pages of one change each; returns its diff (its staging table
    left as the kill left it) and what it appended."""
    spec = ctx.wal.connectors(gw)["shop"].ingest.tables[0]  # type: ignore[union-attr]
    diff = SnapshotDiff(ctx.spark, ctx.lake_catalog, jdbc_source(url), spec, gw, "shop")
    service = SyncService(ctx.wal, clock)
    appended: dict[str, int] = {}

    def append(deltas: Any) -> Any:
        entries = service.append(gw, "shop", deltas)
        for entry in entries:
            appended[entry.op] = appended.get(entry.op, 0) + 1
        return entries

    stream = _KilledRun(DiffStream(diff, page_size=1), pages_before_kill)
    try:
        run_streams(
            [stream],
            gw=gw,
            connector="shop",
            append=append,
            store=ctx.wal,
            clock=clock,
            chunk_size=1,
        )
    except _Killed:
        assert pages_before_kill is not None
    return diff, appended


def test_a_diff_killed_at_each_crash_point_loses_nothing_and_the_warehouse_stays_bounded(
    ctx: PipelineContext,
    wal: WriteAheadLog,
    gw: str,
    postgres_url: str,
    source: sqlalchemy.Engine,
    lake_dir: Path,
) -> None:
    _register(wal, gw, postgres_url)
    ticks = itertools.count(NOW_MS)

    def clock() -> int:  # the runs' wall clock, one run after the other
        return next(ticks)

    def poll() -> dict[str, int]:
        report = run_connector(ctx, gw, "shop", clock=clock)
        assert _wal_rows(wal, gw) == _source_rows(source)
        name = "_ls_snapshot__shop__items"
        generations = lake_dir / "warehouse" / gw / GENERATIONS / name
        assert len(list(generations.iterdir())) == 1  # the snapshot's; staging swept
        assert not table_exists(ctx.spark, f"lakesync.{gw}.{name}__staging")
        return report.deltas

    assert poll() == {"INSERT": 6}
    files, size, folders = _warehouse(lake_dir, gw)
    assert folders == {GENERATIONS}  # nothing outside the generations

    # Killed after committing its changes, before the promote; then the source undoes them:
    # row 2 changed back, row 7 deleted again, row 5 re-created as it was.
    _sql(source, "UPDATE items SET price = 99 WHERE id = 2", "DELETE FROM items WHERE id = 5")
    _sql(source, "INSERT INTO items VALUES (7, 'item 7', 7)")
    _, appended = _killed_run(ctx, gw, postgres_url, clock)
    assert appended == {"UPDATE": 1, "DELETE": 1, "INSERT": 1}
    assert set(_wal_rows(wal, gw)) == {"1", "2", "3", "4", "6", "7"}
    _sql(source, "UPDATE items SET price = 2 WHERE id = 2", "DELETE FROM items WHERE id = 7")
    _sql(source, "INSERT INTO items VALUES (5, 'item 5', 5)")
    assert poll() == {"UPDATE": 1, "DELETE": 1, "INSERT": 1}  # each undone change reached it

    # Killed midway: one of its three changes committed, then the source undoes all three.
    _sql(source, "UPDATE items SET price = 60 WHERE id = 6", "DELETE FROM items WHERE id = 2")
    _sql(source, "UPDATE items SET name = 'four' WHERE id = 4")
    _, appended = _killed_run(ctx, gw, postgres_url, clock, pages_before_kill=1)
    assert sum(appended.values()) == 1
    _sql(
        source,
        "UPDATE items SET price = 6 WHERE id = 6",
        "INSERT INTO items VALUES (2, 'item 2', 2)",
    )
    _sql(source, "UPDATE items SET name = 'item 4' WHERE id = 4")
    undone = {"DELETE": "INSERT", "UPDATE": "UPDATE"}  # only the committed change is undone,
    assert poll() == {undone[op]: 1 for op in appended}  # the other two append nothing

    # Killed after its mark, with the old snapshot dropped and the staging table not renamed:
    # the next run finishes the swap and compares with what that run sent.
    _sql(source, "UPDATE items SET name = 'renamed' WHERE id = 1")
    diff, appended = _killed_run(ctx, gw, postgres_url, clock)
    assert appended == {"UPDATE": 1}
    diff.tables.mark_ready()
    ctx.spark.sql(f"DROP TABLE {diff.snapshot}")  # its folder not deleted yet
    _sql(source, "DELETE FROM items WHERE id = 3")
    assert poll() == {"DELETE": 1}  # the delete is seen, nothing is sent again

    # Killed after its mark, before the drop.
    _sql(source, "UPDATE items SET price = 40 WHERE id = 4")
    _killed_run(ctx, gw, postgres_url, clock)[0].tables.mark_ready()
    assert poll() == {}

    # Killed while staging: a staging table without rows, and a file of an uncommitted write.
    diff.tables.create_staging("_ls_row_id STRING, _ls_row STRING")
    staged = diff.tables.staged()
    assert staged is not None and staged.records is None and not staged.ready
    location = str(load_table(ctx.lake_catalog, diff.staging).location()).removeprefix("file:")
    (Path(location) / "data").mkdir(parents=True)
    (Path(location) / "data" / "00000-0-killed.parquet").write_bytes(b"PAR1")
    _sql(source, "INSERT INTO items VALUES (9, 'item 9', 9)")
    assert poll() == {"INSERT": 1}

    # Many runs later the warehouse holds what it held after the first: one generation.
    assert _warehouse(lake_dir, gw)[0] == files
    assert _warehouse(lake_dir, gw)[1] < 2 * size
    assert [t.name for t in lake_tables(ctx, gw)] == []  # upkeep leaves connector tables alone
    assert {"stage", "compare"} <= set(diff.seconds)  # the steps the killed run timed


def test_diff_reads_an_integer_row_id_in_ranges_and_takes_over_an_earlier_releases_tables(
    ctx: PipelineContext,
    wal: WriteAheadLog,
    gw: str,
    postgres_url: str,
    source: sqlalchemy.Engine,
    lake_dir: Path,
) -> None:
    # ids spread out, beyond the bounds of any range and below zero: every row read once
    _sql(source, "INSERT INTO items VALUES (-40, 'minus', 0), (1000, 'far', 1), (1001, NULL, 2)")
    _register(wal, gw, postgres_url)
    spec = wal.connectors(gw)["shop"].ingest.tables[0]  # type: ignore[union-attr]

    def read(rows_per_read: int) -> tuple[int, list[tuple[str, str]]]:
        diff = SnapshotDiff(
            ctx.spark, ctx.lake_catalog, jdbc_source(postgres_url), spec, gw, "shop"
        )
        diff.rows_per_read = rows_per_read
        df = diff._read_source()
        return df.rdd.getNumPartitions(), sorted((r[0], r[1]) for r in df.collect())

    parts, ranged = read(100)
    assert parts == default_parallelism(ctx.spark) >= 2
    assert read(10_000) == (1, ranged)  # one query when the ids span less than two ranges
    assert len(ranged) == 9 and ranged[0] == ("-40", '{"name":"minus","price":0}')
    assert ("1001", '{"name":null,"price":2}') in ranged  # a null kept as a null

    # The snapshot as a release before generations wrote it (in a folder named after it), and
    # the staging table's files it leaked (dropped without PURGE).
    name = f"lakesync.{gw}._ls_snapshot__shop__items"
    ctx.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lakesync.{gw}")
    ctx.spark.sql(
        f"CREATE TABLE {name} USING iceberg AS SELECT CAST(id AS STRING) AS _ls_row_id, "
        "to_json(named_struct('name', name, 'price', price)) AS _ls_row "
        "FROM VALUES (1, 'item 1', 1), (2, 'old', 2) AS t(id, name, price)"
    )
    ctx.spark.sql(f"CREATE TABLE {name}__staging USING iceberg AS SELECT * FROM {name}")
    ctx.spark.sql(f"DROP TABLE {name}__staging")
    before = _warehouse(lake_dir, gw)[2]
    assert before == {"_ls_snapshot__shop__items", "_ls_snapshot__shop__items__staging"}
    report = run_connector(ctx, gw, "shop", clock=lambda: NOW_MS)
    assert report.deltas == {"INSERT": 8}  # compared with the old snapshot: row 1 unchanged
    assert set(_wal_rows(wal, gw)) == set(_source_rows(source)) - {"1"}
    assert _warehouse(lake_dir, gw)[2] == {GENERATIONS}  # the old folders gone
    assert run_connector(ctx, gw, "shop", clock=lambda: NOW_MS + 1).deltas == {}

    # An emptied source stages a commit of no rows: a run killed after it counts as one that
    # may have sent changes (every row a delete), not as one killed while staging.
    _sql(source, "DELETE FROM items")
    emptied = SnapshotDiff(ctx.spark, ctx.lake_catalog, jdbc_source(postgres_url), spec, gw, "shop")
    assert emptied.stage() == 0
    staged = emptied.tables.staged()
    assert staged is not None and staged.records == 0


def test_census_known_ids_are_swapped_in_recovered_and_kept_to_one_generation(
    ctx: PipelineContext, wal_url: str, gw: str, lake_dir: Path
) -> None:
    def census(head: int, ids: list[tuple[str, str]], *, promote: bool = True) -> IdCensus:
        run = IdCensus(ctx.spark, ctx.lake_catalog, gw, "crm", jdbc_source(wal_url), head)
        run.stage(ids)
        found = run.compare()
        vanished.append(sorted(found.vanished))
        if promote:
            run.promote()
        return run

    def sweep_dies_midway() -> Iterator[tuple[str, str]]:
        yield ("t", "x")
        raise _Killed

    vanished: list[list[tuple[str, str]]] = []
    census(10, [("t", "a"), ("t", "b"), ("t", "c")])
    files = _warehouse(lake_dir, gw)[0]
    # killed after its mark, with the old known table dropped: the next census finishes it
    run = census(11, [("t", "a"), ("t", "b")], promote=False)
    run.tables.mark_ready({KNOWN_THROUGH: "11"})
    ctx.spark.sql(f"DROP TABLE {run.known_table}")  # its folder not deleted yet
    census(12, [("t", "a")])
    # killed before its mark: its sweep is dropped and the known ids compared again
    census(13, [], promote=False)
    # killed while staging, one batch written: dropped too
    with pytest.raises(_Killed):
        IdCensus(ctx.spark, ctx.lake_catalog, gw, "crm", jdbc_source(wal_url), 14, batch=1).stage(
            sweep_dies_midway()
        )
    assert run.tables.staged() is not None
    # killed after its mark, before the drop: the next census finishes the swap
    census(15, [("t", "a"), ("t", "d"), ("t", "e")], promote=False).tables.mark_ready(
        {KNOWN_THROUGH: "15"}
    )
    census(16, [("t", "a"), ("t", "d"), ("t", "f")])  # as many ids as the first: as many files
    assert vanished == [[], [("t", "c")], [("t", "b")], [("t", "a")], [], [("t", "e")]]
    known = known_ids_table(gw, "crm")
    props = ctx.spark.sql(f"SHOW TBLPROPERTIES {known} ('{KNOWN_THROUGH}')")
    assert props.collect()[0]["value"] == "16"
    assert len(list((lake_dir / "warehouse" / gw / GENERATIONS / "_ls_known__crm").iterdir())) == 1
    assert _warehouse(lake_dir, gw)[0] == files


def test_a_diff_poll_waits_for_the_lakes_lock_and_a_cursor_poll_does_not(
    ctx: PipelineContext,
    wal: WriteAheadLog,
    gw: str,
    postgres_url: str,
    source: sqlalchemy.Engine,
) -> None:
    """Two runs of one connector must not overlap on its staging table (the second would
    take the first's for a dead run's), nor its commits collide with a stage's: a ``diff``
    poll holds the lake's lock; a ``cursor`` poll needs no lake and never waits for it."""
    _register(wal, gw, postgres_url)
    impatient = dataclasses.replace(ctx.settings, lock_timeout_s=0.5)
    polling = PipelineContext(impatient, spark=ctx.spark, wal=wal)
    other = PipelineContext(ctx.settings, spark=ctx.spark, wal=wal)  # another process's stage
    with other.exclusive("flush", gw):
        with pytest.raises(FlushError, match="connector shop"):
            run_connector(polling, gw, "shop", clock=lambda: NOW_MS)
        assert _wal_rows(wal, gw) == {}  # it gave up before reading anything
        _sql(
            source,
            "CREATE TABLE orders (id INT PRIMARY KEY, total INT)",
            "INSERT INTO orders SELECT i, 10 * i FROM generate_series(1, 3) i",
        )
        cursor = {
            "name": "orders",
            "type": "postgres",
            "postgres": {"connectionString": postgres_url},
            "ingest": {
                "tables": [
                    {
                        "table": "orders",
                        "strategy": {"type": "cursor", "cursorColumn": "id"},
                    }
                ]
            },
        }
        wal.save_connector(gw, parse_connector_config(cursor))
        assert run_connector(polling, gw, "orders", clock=lambda: NOW_MS).deltas == {"INSERT": 3}
    assert run_connector(polling, gw, "shop", clock=lambda: NOW_MS + 1).records == 6
