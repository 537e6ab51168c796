"""SQL sources against real PostgreSQL and MariaDB: the ``cursor`` strategy on the driver and
the ``diff`` strategy as a Spark job, appended to the WAL as client ``ingest:<connector>``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from lakesync_platform.core.connectors import parse_connector_config
from lakesync_platform.pipeline.connectors import run_connector
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import NOW_MS


def _with_password_ref(url: str) -> str:
    """``url`` with its (empty) password given as the ``${SRC_PW}`` reference."""
    user, rest = url.split("://", 1)[1].split("@", 1)
    scheme = url.split("://", 1)[0]
    return f"{scheme}://{user.split(':')[0]}:${{SRC_PW}}@{rest}"


@pytest.fixture
def ctx(spark: Any, wal: WriteAheadLog, tmp_path: Path) -> PipelineContext:
    settings = PipelineSettings(data_dir=tmp_path, defs_dir=tmp_path / "defs", env={"SRC_PW": ""})
    return PipelineContext(settings, spark=spark, wal=wal)


def _source(url: str) -> sqlalchemy.Engine:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2), "
            "updated_at TIMESTAMP NOT NULL)"
        )
        for i in range(1, 8):
            conn.exec_driver_sql(
                "INSERT INTO items VALUES (%s, %s, %s, %s)",
                (i, f"item {i}", i * 1.5, f"2026-01-01 00:00:0{i}"),
            )
    return engine


def _rows(wal: WriteAheadLog, gw: str) -> dict[str, dict[str, Any]]:
    service = SyncService(wal, lambda: NOW_MS)
    return {k: s.values() for k, s in service.known_rows(gw, "items").items() if s.live}


def _register(wal: WriteAheadLog, gw: str, kind: str, url: str, strategy: dict[str, Any]) -> None:
    cfg = parse_connector_config(
        {
            "name": "shop",
            "type": kind,
            kind: {"connectionString": _with_password_ref(url)},
            "ingest": {"chunkSize": 3, "tables": [{"table": "items", "strategy": strategy}]},
        }
    )
    wal.save_connector(gw, cfg)


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_the_cursor_strategy_polls_new_and_changed_rows(
    ctx: PipelineContext, wal: WriteAheadLog, gw: str, kind: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url" if kind == "postgres" else "mariadb_url")
    engine = _source(url)
    _register(
        wal, gw, kind, url, {"type": "cursor", "cursorColumn": "updated_at", "lookbackMs": 1000}
    )
    first = run_connector(ctx, gw, "shop", clock=lambda: NOW_MS)
    assert first.records == 7 and first.deltas == {"INSERT": 7}
    assert first.streams[0].pages == 3  # pages of chunkSize rows
    assert first.streams[0].state_after == {"cursor": "2026-01-01T00:00:07", "kind": "datetime"}
    assert _rows(wal, gw)["3"] == {
        "name": "item 3",
        "price": 4.5,
        "updated_at": "2026-01-01T00:00:03",
    }
    assert {e.client_id for e in wal.read_entries(gw, 0)} == {"ingest:shop"}
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE items SET name = 'renamed', updated_at = '2026-01-01 00:00:09' WHERE id = 2"
        )
        conn.exec_driver_sql("INSERT INTO items VALUES (8, 'item 8', 1, '2026-01-01 00:00:10')")
    second = run_connector(ctx, gw, "shop", clock=lambda: NOW_MS + 1000)
    # the lookback re-reads row 7 (unchanged: nothing appended); 2 changed one column; 8 is new
    assert second.records == 3 and second.deltas == {"UPDATE": 1, "INSERT": 1}
    assert _rows(wal, gw)["2"]["name"] == "renamed" and "8" in _rows(wal, gw)
    engine.dispose()


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_the_diff_strategy_finds_inserts_updates_and_deletes(
    ctx: PipelineContext, wal: WriteAheadLog, gw: str, kind: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url" if kind == "postgres" else "mariadb_url")
    engine = _source(url)
    _register(wal, gw, kind, url, {"type": "diff"})
    first = run_connector(ctx, gw, "shop", clock=lambda: NOW_MS)
    assert first.deltas == {"INSERT": 7}
    assert _rows(wal, gw)["3"]["name"] == "item 3"
    assert run_connector(ctx, gw, "shop", clock=lambda: NOW_MS + 1).records == 0  # no change
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE items SET price = 99 WHERE id = 2")
        conn.exec_driver_sql("DELETE FROM items WHERE id = 5")
        conn.exec_driver_sql("INSERT INTO items VALUES (8, 'item 8', 1, '2026-01-01 00:00:10')")
    third = run_connector(ctx, gw, "shop", clock=lambda: NOW_MS + 2)
    assert third.deltas == {"UPDATE": 1, "DELETE": 1, "INSERT": 1}
    rows = _rows(wal, gw)
    assert rows["2"]["price"] == 99 and "5" not in rows and rows["8"]["name"] == "item 8"
    assert wal.connector_state(gw, "shop") == {"items": {"snapshotRows": 7}}
    engine.dispose()
