"""The lake as a pull source: pushes flushed by Spark, read back by pyiceberg through a source
pull, to the same rows the gateway holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakesync_platform.adapters.lake import LAKE_CATALOG, LakeSource
from lakesync_platform.adapters.source import SourceSpec, open_source
from lakesync_platform.client import InProcessTransport, create_client
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.spark.flush import flush_gateway
from lakesync_platform.spark.session import CATALOG
from lakesync_platform.spark.wal_source import jdbc_source
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher

pytestmark = pytest.mark.spark


def test_pulls_from_the_lakes_change_log_match_the_gateway(
    spark: Any,
    lake_catalog: Any,
    spark_settings: Any,
    wal: WriteAheadLog,
    wal_url: str,
    service: SyncService,
    pusher: Pusher,
    gw: str,
    todos: TableSchema,
    tmp_path: Any,
) -> None:
    assert LAKE_CATALOG == CATALOG
    source = open_source(
        SourceSpec(
            "lake",
            "lake",
            "sqlite:///" + str(spark_settings.data_dir / "catalog.db"),
            {"warehouse": spark_settings.resolved_warehouse, "namespace": gw},
        )
    )
    assert isinstance(source, LakeSource)
    assert source.deltas_since(0) == []  # nothing flushed yet: no log, no rows
    for i in range(30):
        pusher.write("a", f"r{i}", title=f"t{i}", done=i % 2 == 0, meta={"i": i})
    pusher.write("b", "r3", title="edited")
    pusher.delete("b", "r4")
    pusher.write("b", "r5", priority=7)
    flush_gateway(spark, lake_catalog, wal, jdbc_source(wal_url), gw)

    log = source.deltas_since(0)
    assert len(log) == 33
    assert [(d.hlc, d.delta_id) for d in log] == sorted((d.hlc, d.delta_id) for d in log)
    assert source.deltas_since(log[9].hlc, limit=3) == log[10:13]
    assert source.latest_state("todos", "r3") == {
        "title": "edited",
        "done": False,
        "meta": {"i": 3},
    }
    assert source.latest_state("todos", "r4") is None
    with pytest.raises(AdapterError, match="flush only"):
        source.insert_deltas(log)

    client = create_client(
        name="reader",
        client_id="reader",
        schemas=[todos],
        transport=InProcessTransport(service, gw, sources={"lake": source}),
        path=tmp_path / "reader.db",
        auto_sync_ms=0,
        pull_page_size=7,
    )
    try:
        client.pull_from("lake")
        local = {r["_rowId"]: r for r in client.db.query("SELECT * FROM todos")}
        expected = dict(service.known_rows(gw, "todos"))
        assert set(local) == {rid for rid, state in expected.items() if state.live}
        for rid, row in local.items():
            values = {k: v for k, v in expected[rid].values().items() if v is not None}
            assert _local(row, todos) == values, rid
    finally:
        client.close()


def _local(row: dict[str, Any], schema: TableSchema) -> dict[str, Any]:
    """A local row's non-null columns as the gateway holds them (SQLite stores booleans as
    integers and json as text)."""
    out: dict[str, Any] = {}
    for col in schema.columns:
        value = row.get(col.name)
        if value is None:
            continue
        if col.type == "boolean":
            value = bool(value)
        elif col.type == "json" and isinstance(value, str):
            value = json.loads(value)
        out[col.name] = value
    return out
