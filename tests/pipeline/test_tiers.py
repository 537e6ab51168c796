"""Destination tiers without Spark: rows move verbatim from a PostgreSQL hot table to a SQLite
cold one exactly once, a re-run moves nothing, the crash windows between the two commits settle
(never a row in neither tier), and a promoted row ends up hot only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.adapters.tiers import SqlTier
from lakesync_platform.core.schema import parse_table_schema

pytestmark = pytest.mark.postgres

TODOS = parse_table_schema(
    {
        "table": "todos",
        "columns": [
            {"name": "title", "type": "string"},
            {"name": "done", "type": "boolean"},
            {"name": "meta", "type": "json"},
        ],
        "softDelete": True,
    }
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def tier(request: pytest.FixtureRequest, postgres_url: str, tmp_path: Path) -> Iterator[SqlTier]:
    """Hot on PostgreSQL; cold on SQLite or MariaDB."""
    hot = SqlAdapter.connect(postgres_url)
    cold_url = (
        f"sqlite:///{tmp_path / 'cold.db'}"
        if request.param == "sqlite"
        else str(request.getfixturevalue("mariadb_url"))
    )
    cold = SqlAdapter.connect(cold_url)
    hot.ensure_table(TODOS)
    with hot.transaction() as conn:
        for day in range(6):  # r0 written on day 0 … r5 on day 5; r1 soft-deleted
            hot.upsert_rows(
                conn,
                TODOS,
                [(f"r{day}", f"title {day}", day % 2 == 0, json.dumps({"day": [day]}))],
                T0 + timedelta(days=day),
            )
        hot.delete_rows(conn, TODOS, ["r1"], T0 + timedelta(days=1, hours=1))
        conn.exec_driver_sql("UPDATE todos SET props = '{\"k\": 1}' WHERE row_id = 'r0'")
    yield SqlTier(hot, cold, TODOS, "todos")
    hot.close()
    cold.close()


def _rows(side: SqlAdapter) -> dict[str, dict[str, Any]]:
    out = {}
    for r in side.read_back(TODOS):
        props = r["props"] if isinstance(r["props"], dict) else json.loads(r["props"])
        stamp = r["synced_at"]
        synced = stamp if isinstance(stamp, datetime) else datetime.fromisoformat(stamp)
        out[r["row_id"]] = {
            "title": r["title"],
            "done": r["done"],
            "meta": r["meta"],
            "props": props,
            "deleted": r["deleted_at"] is not None,
            "synced_at": synced.replace(tzinfo=UTC) if synced.tzinfo is None else synced,
        }
    return out


def test_rows_move_verbatim_once_and_a_rerun_moves_nothing(tier: SqlTier) -> None:
    before = _rows(tier.hot)
    done = tier.move(T0 + timedelta(days=3), batch=2)  # r0, r1, r2: not written for 3 days
    assert (done.moved, done.kept, done.released) == (3, 0, 0)
    assert sorted(_rows(tier.hot)) == ["r3", "r4", "r5"]
    cold = _rows(tier.cold)
    assert cold == {k: before[k] for k in ("r0", "r1", "r2")}  # props, deleted_at, synced_at too
    assert cold["r0"]["props"] == {"k": 1} and cold["r1"]["deleted"]
    again = tier.move(T0 + timedelta(days=3), batch=2)
    assert (again.moved, again.kept) == (0, 0)
    assert _rows(tier.cold) == cold and sorted(_rows(tier.hot)) == ["r3", "r4", "r5"]


def test_a_crash_between_the_commits_is_finished_by_the_next_run(tier: SqlTier) -> None:
    before = _rows(tier.hot)
    rows = tier._old_rows(T0 + timedelta(days=2), "", 10)  # r0, r1
    tier.cold.ensure_table(TODOS)
    with tier.cold.transaction() as conn:
        tier._put(tier.cold, conn, rows, replace=True)
    # … the process died here: r0 and r1 are in both tiers, identical.
    assert sorted(_rows(tier.cold)) == ["r0", "r1"] and "r0" in _rows(tier.hot)
    done = tier.move(T0 + timedelta(days=2))
    assert done.moved == 2
    assert _rows(tier.cold) == {k: before[k] for k in ("r0", "r1")}
    assert sorted(_rows(tier.hot)) == ["r2", "r3", "r4", "r5"]


def test_a_promoted_row_ends_up_hot_only_even_across_a_crash(tier: SqlTier) -> None:
    tier.move(T0 + timedelta(days=3))
    # Materialise changes r0 and r1: promoted into hot inside its transaction …
    with tier.hot.transaction() as conn:
        assert tier.promote(conn, ["r0", "r1", "r4", "nope"]) == 2
        tier.hot.upsert_rows(conn, TODOS, [("r0", "changed", True, None)], T0 + timedelta(days=9))
    # … and the process died before releasing their cold copies: they are in both tiers.
    assert {"r0", "r1"} <= set(_rows(tier.cold)) & set(_rows(tier.hot))
    hot = _rows(tier.hot)
    assert hot["r0"]["title"] == "changed" and hot["r0"]["props"] == {"k": 1}
    assert hot["r1"]["deleted"] and hot["r1"]["title"] == "title 1"  # back as it was
    done = tier.move(T0 + timedelta(days=3))  # the next run releases first: hot wins
    # r1's change (deleting a deleted row) wrote nothing: unwritten since day 1, it moves again.
    assert (done.released, done.moved) == (2, 1)
    assert sorted(_rows(tier.cold)) == ["r1", "r2"]
    assert sorted(_rows(tier.hot)) == ["r0", "r3", "r4", "r5"]
    assert tier.release() == 0  # nothing left to release
