"""The asset checks over what a run wrote (and the audit over everything): they pass on the
normal pipeline and fail on a planted loss, duplicate or divergence."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from lakesync_platform.adapters.sql import SqlAdapter
from lakesync_platform.core.schema import TableSchema
from lakesync_platform.pipeline.context import CheckOutcome, PipelineContext
from lakesync_platform.pipeline.flush import (
    audit_log_exactly_once,
    check_log_exactly_once,
    run_flush,
)
from lakesync_platform.pipeline.materialise import (
    audit_destination_matches_state,
    check_destination_matches_state,
    run_materialise,
)
from lakesync_platform.pipeline.state import (
    audit_state_matches_log,
    check_state_matches_log,
    run_state,
)
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.layout import deltas_table, q, state_table
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import TODOS, Pusher

pytestmark = [pytest.mark.spark]


def _context(
    spark: Any, wal: WriteAheadLog, lake_dir: Path, wal_url: str, tmp: Path, gw: str
) -> PipelineContext:
    defs = tmp / "defs"
    defs.mkdir()
    doc = {
        "gateway": gw,
        "tables": [
            {"table": "todos", "columns": [{"name": c.name, "type": c.type} for c in TODOS.columns]}
        ],
        "destinations": [
            {"name": "local", "kind": "sqlite", "url": f"sqlite:///{tmp / 'dest.db'}"}
        ],
    }
    (defs / "todos.yaml").write_text(yaml.safe_dump(doc))
    settings = PipelineSettings(data_dir=lake_dir, wal_url=wal_url, defs_dir=defs)
    return PipelineContext(settings, spark=spark, wal=wal)


def _sync(ctx: PipelineContext, gw: str) -> None:
    run_flush(ctx, gw)
    run_state(ctx, gw)
    run_materialise(ctx, gw)


def _checks(ctx: PipelineContext, gw: str) -> dict[str, CheckOutcome]:
    return {
        "exactly_once": check_log_exactly_once(ctx, gw),
        "matches_log_replay": check_state_matches_log(ctx, gw, "todos"),
        "matches_state": check_destination_matches_state(ctx, gw, "local", "todos"),
    }


def _audits(ctx: PipelineContext, gw: str) -> dict[str, CheckOutcome]:
    return {
        "exactly_once": audit_log_exactly_once(ctx, gw),
        "matches_log_replay": audit_state_matches_log(ctx, gw, "todos"),
        "matches_state": audit_destination_matches_state(ctx, gw, "local", "todos"),
    }


def _passed(outcomes: dict[str, CheckOutcome]) -> dict[str, bool]:
    return {name: o.passed for name, o in outcomes.items()}


ALL_PASS = {"exactly_once": True, "matches_log_replay": True, "matches_state": True}


@pytest.fixture
def ctx(
    spark: Any, wal: WriteAheadLog, lake_dir: Path, wal_url: str, tmp_path: Path, gw: str
) -> Iterator[PipelineContext]:
    """A pipeline context with one SQLite destination, ``local``, over the shared session."""
    made = _context(spark, wal, lake_dir, wal_url, tmp_path, gw)
    yield made
    made.close()


def _ten_rows(pusher: Pusher) -> None:
    """Ten rows ``r0``..``r9``, every column set."""
    for i in range(10):
        pusher.write("a", f"r{i}", title=f"t{i}", done=False, priority=i, meta={"n": i})


def test_range_checks_pass_on_the_normal_pipeline_and_cover_the_run_only(
    ctx: PipelineContext, gw: str, pusher: Pusher, todos: TableSchema
) -> None:
    _ten_rows(pusher)
    _sync(ctx, gw)
    first = _checks(ctx, gw)
    assert _passed(first) == ALL_PASS, {n: o.description for n, o in first.items()}
    assert first["matches_log_replay"].metadata["rows"] == 10
    pusher.write("b", "r1", title="one!", done=True)
    pusher.delete("a", "r2")
    pusher.delete("a", "r3")
    pusher.write("c", "r3", priority=7)  # resurrected with one column
    pusher.write("c", "r4", meta="plain")  # a JSON string where an object was
    pusher.write("ü-client", "r5", title="non-ascii client")
    _sync(ctx, gw)
    second = _checks(ctx, gw)
    assert _passed(second) == ALL_PASS, {n: o.description for n, o in second.items()}
    assert second["exactly_once"].metadata["range"] == "11..16"
    assert second["matches_log_replay"].metadata["rows"] == 5  # r1..r5, not the lake's ten
    assert second["matches_state"].metadata["rows"] == 5
    assert _passed(_audits(ctx, gw)) == ALL_PASS
    assert _audits(ctx, gw)["matches_log_replay"].metadata["rows"] == 10


def test_random_histories_pass_the_range_checks_and_the_audit(
    ctx: PipelineContext, gw: str, pusher: Pusher, todos: TableSchema
) -> None:
    """Ties, out-of-order stamps, deletes and resurrections from several clients: the
    independent replay agrees with the state stage on every run and over the whole log."""
    rnd = random.Random(11)
    for _ in range(3):
        for _ in range(40):
            client = rnd.choice(["a", "b", "Z", "é"])
            row = f"r{rnd.randrange(8)}"
            hlc = pusher.hlc(rnd.randrange(1, 60), rnd.randrange(2))
            if rnd.random() < 0.2:
                pusher.push(client, [pusher.delta(client, row, hlc, op="DELETE")])
                continue
            cols = {
                k: v
                for k, v in {
                    "title": f"t{rnd.randrange(3)}",
                    "done": rnd.random() < 0.5,
                    "priority": rnd.randrange(3),
                    "meta": rnd.choice([{"x": 1}, [1, 2], "s", 5, None]),
                }.items()
                if rnd.random() < 0.6
            } or {"title": "only"}
            pusher.push(client, [pusher.delta(client, row, hlc, **cols)])
        _sync(ctx, gw)
        outcomes = _checks(ctx, gw)
        assert _passed(outcomes) == ALL_PASS, {
            n: (o.passed, o.metadata) for n, o in outcomes.items()
        }
    audits = _audits(ctx, gw)
    assert _passed(audits) == ALL_PASS, {n: o.metadata for n, o in audits.items()}


def _cursor_of(spark: Any, gw: str, row_id: str) -> int:
    rows = spark.sql(
        f"SELECT max(`cursor`) AS c FROM {deltas_table(gw)} WHERE row_id = '{row_id}'"
    ).collect()
    return int(rows[0]["c"])


def test_a_planted_loss_in_the_log_fails_exactly_once(
    spark: Any, ctx: PipelineContext, gw: str, pusher: Pusher, todos: TableSchema
) -> None:
    _ten_rows(pusher)
    _sync(ctx, gw)
    lost = _cursor_of(spark, gw, "r4")
    spark.sql(f"DELETE FROM {deltas_table(gw)} WHERE `cursor` = {lost}")
    outcome = check_log_exactly_once(ctx, gw)
    assert not outcome.passed
    assert (outcome.metadata["missing"], outcome.metadata["sample"]) == (1, [lost])
    assert not audit_log_exactly_once(ctx, gw).passed


def test_a_planted_duplicate_in_the_log_fails_exactly_once(
    spark: Any, ctx: PipelineContext, gw: str, pusher: Pusher, todos: TableSchema
) -> None:
    _ten_rows(pusher)
    _sync(ctx, gw)
    twice = _cursor_of(spark, gw, "r6")
    name = deltas_table(gw)
    spark.sql(f"INSERT INTO {name} SELECT * FROM {name} WHERE `cursor` = {twice}")
    outcome = check_log_exactly_once(ctx, gw)
    assert not outcome.passed
    assert (outcome.metadata["duplicates"], outcome.metadata["sample"]) == (1, [twice])
    audit = audit_log_exactly_once(ctx, gw)
    assert not audit.passed and audit.metadata["duplicates"] == 1


@pytest.mark.parametrize(
    "tamper",
    [
        "title = 'changed behind the pipeline'",
        f"{q('title$hlc')} = {q('title$hlc')} - 1",
        f"{q('title$client')} = 'a'",
        f"{q('_ls$live')} = false",
        f"{q('_ls$delete_hlc')} = {q('title$hlc')} + 1, {q('_ls$delete_client')} = 'a'",
    ],
)
def test_a_state_row_changed_behind_the_pipeline_fails_matches_log_replay(
    spark: Any, ctx: PipelineContext, gw: str, pusher: Pusher, todos: TableSchema, tamper: str
) -> None:
    _ten_rows(pusher)
    _sync(ctx, gw)
    pusher.write("b", "r1", title="one!")
    pusher.write("b", "r2", title="two!")
    _sync(ctx, gw)
    spark.sql(f"UPDATE {state_table(gw, 'todos')} SET {tamper} WHERE row_id = 'r1'")
    outcome = check_state_matches_log(ctx, gw, "todos")
    assert not outcome.passed
    assert (outcome.metadata["differ"], outcome.metadata["sample"]) == (1, ["r1"])
    assert outcome.metadata["rows"] == 2  # what the run touched, not the lake
    audit = audit_state_matches_log(ctx, gw, "todos")
    assert not audit.passed and audit.metadata["sample"] == ["r1"]


@pytest.mark.parametrize(
    ("row", "tamper"),
    [
        ("r8", "title = 'x'"),  # a row the run did not touch
        ("r1", f"{q('priority$hlc')} = {q('priority$hlc')} + 1"),  # a column it did not write
    ],
)
def test_what_the_run_did_not_write_is_left_to_the_audit(
    spark: Any,
    ctx: PipelineContext,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
    row: str,
    tamper: str,
) -> None:
    """The range check knows the range's entries only: a stamp newer than all of them may come
    from before the range. The audit replays everything."""
    _ten_rows(pusher)
    _sync(ctx, gw)
    pusher.write("b", "r1", title="one!")
    _sync(ctx, gw)
    spark.sql(f"UPDATE {state_table(gw, 'todos')} SET {tamper} WHERE row_id = '{row}'")
    assert check_state_matches_log(ctx, gw, "todos").passed
    audit = audit_state_matches_log(ctx, gw, "todos")
    assert not audit.passed and audit.metadata["sample"] == [row]


def test_a_lost_state_update_fails_matches_log_replay(
    spark: Any, ctx: PipelineContext, gw: str, pusher: Pusher, todos: TableSchema
) -> None:
    """A row whose update the state never applied keeps its old cursor: the range names it."""
    _ten_rows(pusher)
    _sync(ctx, gw)
    pusher.write("b", "r1", title="one!")
    pusher.write("b", "r2", title="two!")
    _sync(ctx, gw)
    old = _cursor_of(spark, gw, "r7")
    spark.sql(
        f"UPDATE {state_table(gw, 'todos')} SET title = 't1', {q('_ls$cursor')} = {old} "
        "WHERE row_id = 'r1'"
    )
    outcome = check_state_matches_log(ctx, gw, "todos")
    assert not outcome.passed and outcome.metadata["sample"] == ["r1"]


def test_a_destination_row_changed_fails_matches_state(
    ctx: PipelineContext, gw: str, pusher: Pusher, todos: TableSchema, tmp_path: Path
) -> None:
    _ten_rows(pusher)
    _sync(ctx, gw)
    pusher.write("b", "r1", title="one!")
    pusher.delete("b", "r2")
    _sync(ctx, gw)
    adapter = SqlAdapter.connect(f"sqlite:///{tmp_path / 'dest.db'}")
    try:
        with adapter.transaction() as conn:
            conn.execute(text("UPDATE todos SET title = 'edited' WHERE row_id = 'r1'"))
            conn.execute(text("UPDATE todos SET deleted_at = NULL WHERE row_id = 'r2'"))
    finally:
        adapter.close()
    outcome = check_destination_matches_state(ctx, gw, "local", "todos")
    assert not outcome.passed
    assert (outcome.metadata["differ"], outcome.metadata["sample"]) == (2, ["r1", "r2"])
    assert outcome.metadata["rows"] == 2
    audit = audit_destination_matches_state(ctx, gw, "local", "todos")
    assert not audit.passed and audit.metadata["rows"] == 10
