"""BigQuery on the emulator: the DatabaseAdapter role (delta log), a declared destination
through the pipeline (flush → state → materialise), and declarations that fail before anything
is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.adapters.bigquery import BigQueryAdapter
from lakesync_platform.adapters.source import SourceSpec, close_source, open_source
from lakesync_platform.core.delta import DELETE, ColumnDelta, RowDelta
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.declarations import DeclarationError
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.materialise import (
    check_destination_matches_state,
    run_materialise,
)
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.testing import free_port
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher


def _delta(
    op: str, row: str, hlc: int, client: str = "a", table: str = "todos", **cols: Any
) -> RowDelta:
    columns = tuple(ColumnDelta(k, v) for k, v in cols.items())
    return RowDelta(
        op, table, row, client, columns, hlc, delta_id(client, hlc, table, row, columns)
    )


def test_delta_log_role(bigquery_dataset: dict[str, str]) -> None:
    adapter = BigQueryAdapter.connect(**bigquery_dataset)
    try:
        adapter.ensure_delta_log()
        adapter.ensure_delta_log()  # idempotent
        d1 = _delta("INSERT", "r1", 10, title="a", done=False, meta={"k": [1]})
        d2 = _delta("UPDATE", "r1", 20, "b", title="b")
        d3 = _delta("UPDATE", "r1", 15, "c", done=True)  # older, other column: kept per column
        d4 = _delta("INSERT", "r2", 12, title="x")
        d5 = _delta(DELETE, "r2", 30)
        d6 = _delta("INSERT", "n1", 11, table="notes", body="hi")
        big = _delta("INSERT", "r3", 2**62 + 1, title="far")  # an HLC beyond float precision
        assert adapter.insert_deltas([d1, d2, d3, d4, d5, d6, big, d1]) == 7
        assert adapter.insert_deltas([d1, d2]) == 0  # idempotent by delta_id
        assert adapter.insert_deltas([]) == 0
        since = adapter.deltas_since(12)
        assert [d.hlc for d in since] == [15, 20, 30, 2**62 + 1]
        assert since[0] == d3 and since[-1] == big
        assert [d.hlc for d in adapter.deltas_since(0, ["notes"])] == [11]
        assert [d.hlc for d in adapter.deltas_since(0, limit=2)] == [10, 11]
        assert adapter.deltas_since(0, ["other"]) == []
        assert adapter.latest_state("todos", "r1") == {
            "title": "b",
            "done": True,
            "meta": {"k": [1]},
        }
        assert adapter.latest_state("todos", "r2") is None  # deleted
        assert adapter.latest_state("todos", "nope") is None
    finally:
        adapter.close()


def test_a_bigquery_dataset_is_a_source_kind(bigquery_dataset: dict[str, str]) -> None:
    """``sources: [{kind: bigquery, url: bigquery://PROJECT/DATASET}]`` opens the delta-log role
    through the source registry (what ``pull?source=NAME`` reads)."""
    url = f"bigquery://{bigquery_dataset['project']}/{bigquery_dataset['dataset']}"
    spec = SourceSpec("bq", "bigquery", url, {"endpoint": bigquery_dataset["endpoint"]})
    source = open_source(spec)
    try:
        source.ensure_delta_log()
        assert source.insert_deltas([_delta("INSERT", "r1", 10, title="a")]) == 1
        assert [d.row_id for d in source.deltas_since(0, limit=10)] == ["r1"]
        assert source.latest_state("todos", "r1") == {"title": "a"}
    finally:
        close_source(source)
    with pytest.raises(AdapterError, match="bigquery://PROJECT/DATASET"):
        open_source(SourceSpec("bq", "bigquery", "bigquery://only-project", {}))


def _context(
    tmp_path: Path, lake_dir: Path, wal: WriteAheadLog, spark: Any, gw: str, dest: str
) -> PipelineContext:
    defs = tmp_path / "defs"
    defs.mkdir(exist_ok=True)
    (defs / "bq.yaml").write_text(f"gateway: {gw}\ndestinations:\n{dest}")
    settings = PipelineSettings(data_dir=lake_dir, wal_url=wal.url, defs_dir=defs)
    return PipelineContext(settings, spark=spark, wal=wal)


@pytest.mark.spark
def test_flush_state_materialise_into_bigquery(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
    bigquery_dataset: dict[str, str],
    tmp_path: Path,
) -> None:
    b = bigquery_dataset
    ctx = _context(
        tmp_path,
        lake_dir,
        wal,
        spark,
        gw,
        f"  - {{name: bq, kind: bigquery, project: {b['project']}, dataset: {b['dataset']}, "
        f"endpoint: '{b['endpoint']}'}}\n",
    )

    def run() -> list[Any]:
        run_flush(ctx, gw)
        run_state(ctx, gw)
        return [result for _, result in run_materialise(ctx, gw).results]

    pusher.write("a", "r1", title="one", done=False, priority=1, meta={"tags": ["x"]})
    pusher.write("a", "r2", title="two", meta="plain")
    pusher.write("b", "r3", title="three", done=True)
    (first,) = run()
    assert (first.upserted, first.deleted) == (3, 0)
    assert check_destination_matches_state(ctx, gw, "bq", "todos").passed
    pusher.write("b", "r1", title="one!", done=True)
    pusher.delete("a", "r2")
    pusher.write("c", "r4", title="four")
    (second,) = run()
    assert (second.upserted, second.deleted) == (2, 1)
    outcome = check_destination_matches_state(ctx, gw, "bq", "todos")
    assert outcome.passed, outcome.metadata
    adapter = BigQueryAdapter.connect(**b)
    try:
        rows = {r["row_id"]: r for r in adapter.read_back(todos)}
        assert rows["r1"]["title"] == "one!" and rows["r1"]["meta"] == {"tags": ["x"]}
        assert rows["r2"]["deleted_at"] is not None and rows["r2"]["title"] == "two"
        assert adapter.watermark(f"{gw}/todos->todos") == second.to_cursor
        ((_, again),) = run_materialise(ctx, gw).results  # nothing new: nothing written
        assert (again.upserted, again.deleted) == (0, 0)
        assert {r["row_id"]: r for r in adapter.read_back(todos)} == rows
    finally:
        adapter.close()


def test_unreachable_endpoint_fails_before_anything_is_written(
    lake_dir: Path, wal: WriteAheadLog, gw: str, todos: TableSchema, tmp_path: Path
) -> None:
    ctx = _context(
        tmp_path,
        lake_dir,
        wal,
        None,
        gw,
        "  - {name: bq, kind: bigquery, project: p, dataset: d, "
        f"endpoint: 'http://127.0.0.1:{free_port()}'}}\n",
    )
    with pytest.raises(
        AdapterError, match=r"BigQuery dataset p\.d at http://127\.0\.0\.1:\d+ is unreachable"
    ):
        run_materialise(ctx, gw)


def test_bad_declaration_fails_before_anything_is_written(
    lake_dir: Path, wal: WriteAheadLog, gw: str, tmp_path: Path
) -> None:
    ctx = _context(
        tmp_path,
        lake_dir,
        wal,
        None,
        gw,
        "  - {name: bq, kind: bigquery, project: p}\n",
    )
    (tmp_path / "defs" / "tables.yaml").write_text(
        f"gateway: {gw}\ntables:\n  - {{table: t1, columns: [{{name: c, type: string}}]}}\n"
    )
    with pytest.raises(DeclarationError, match="bigquery needs a dataset"):
        run_materialise(ctx, gw)
    assert wal.schemas(gw) == {}  # the declared table was not registered either
