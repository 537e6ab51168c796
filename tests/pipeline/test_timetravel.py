"""Time travel: ``lakesync query`` reads a past state back exactly, ``lakesync history`` lists
snapshots with their summaries, bad parameters get one clear line; ``lakesync status`` shows
the lake's tables."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from lakesync_platform.cli import main
from lakesync_platform.core.errors import NotFoundError, ValidationError
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.timetravel import parse_as_of, pin_tables
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher
from .test_upkeep import _history


def test_as_of_parsing_and_pins() -> None:
    assert parse_as_of("1767000000123") == 1_767_000_000_123
    assert parse_as_of("2026-01-01") == parse_as_of("2026-01-01T00:00:00Z") == 1_767_225_600_000
    assert parse_as_of("2026-01-01 01:00+01:00") == 1_767_225_600_000
    with pytest.raises(ValidationError, match="bad timestamp 'yesterday'"):
        parse_as_of("yesterday")
    histories = {"a": _history((1, 100), (2, 200)), "b": _history((7, 150))}
    at = pin_tables(histories, "g", as_of_ms=120)
    assert [(p.table, p.snapshot_id) for p in at.pinned] == [("a", 1)]
    assert "no snapshot at" in at.missing["b"]
    by_id = pin_tables(histories, "g", snapshot_id=7)  # b's commit: a as of that moment
    assert [(p.table, p.snapshot_id) for p in by_id.pinned] == [("a", 1), ("b", 7)]
    with pytest.raises(NotFoundError, match="unknown snapshot 5 in gateway 'g'"):
        pin_tables(histories, "g", snapshot_id=5)
    with pytest.raises(NotFoundError, match="before the first snapshot of every table"):
        pin_tables(histories, "g", as_of_ms=99)
    with pytest.raises(ValidationError, match="not both"):
        pin_tables(histories, "g", as_of_ms=120, snapshot_id=1)


def _invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


def _one_line_error(result: Result, code: int, text: str) -> None:
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("Error: ") and text in lines[-1], result.stderr
    assert "Traceback" not in result.output and "at org." not in result.output
    assert "java" not in lines[-1].lower()


@pytest.mark.spark
def test_query_reads_a_past_state_back_exactly(
    spark: Any, lake_dir: Path, wal: WriteAheadLog, wal_url: str, gw: str, pusher: Pusher
) -> None:
    from lakesync_platform.core.schema import parse_table_schema

    wal.save_schema(
        gw,
        parse_table_schema(
            {
                "table": "todos",
                "columns": [{"name": "title", "type": "string"}, {"name": "n", "type": "number"}],
            }
        ),
    )
    ctx = PipelineContext(
        PipelineSettings.from_env({}, data_dir=lake_dir, wal_url=wal_url), spark=spark, wal=wal
    )
    pusher.write("a", "r1", title="one", n=1)
    pusher.write("a", "r2", title="two", n=2)
    run_flush(ctx, gw)
    (first,) = run_state(ctx, gw)
    pusher.write("b", "r1", title="one again")
    pusher.delete("a", "r2")
    pusher.write("b", "r3", title="three", n=3)
    run_flush(ctx, gw)
    (second,) = run_state(ctx, gw)
    assert first.snapshot_id is not None and second.snapshot_id != first.snapshot_id

    where = ["--gw", gw, "--data-dir", str(lake_dir)]
    sql = "SELECT row_id, title, n, `_ls$live` AS live FROM todos ORDER BY row_id"

    def rows(*extra: str) -> list[list[Any]]:
        result = _invoke(["query", sql, "--json", *where, *extra])
        assert result.exit_code == 0, result.output
        return list(json.loads(result.stdout)["rows"])

    then = [["r1", "one", 1.0, True], ["r2", "two", 2.0, True]]
    now = [["r1", "one again", 1.0, True], ["r2", None, None, False], ["r3", "three", 3.0, True]]
    assert rows("--snapshot", str(first.snapshot_id)) == then
    assert rows() == now
    history = _invoke(["history", "todos", "--json", *where])
    assert history.exit_code == 0, history.output
    snaps = json.loads(history.stdout)["snapshots"]
    assert [s["snapshot_id"] for s in snaps] == [first.snapshot_id, second.snapshot_id]
    assert [s["operation"] for s in snaps] == ["append", "overwrite"]
    assert snaps[0]["summary"]["added-records"] == "2" and snaps[1]["refs"] == ["main"]
    # At the first state run's commit, every table reads as it was then: the log too, which
    # held the first flush only.
    between = str(snaps[0]["committed_ms"])
    assert rows("--as-of", between) == then
    log = _invoke(
        ["query", "SELECT count(*) AS c FROM lakesync_deltas", *where, "--as-of", between]
    )
    assert log.exit_code == 0, log.output
    assert log.stdout == "c\n-\n2\n(1 row)\n"
    assert f"todos @ {first.snapshot_id}" in log.stderr

    listing = _invoke(["history", "lakesync_deltas", *where])
    assert listing.exit_code == 0, listing.output
    lines = listing.stdout.splitlines()
    assert lines[0] == f"lakesync_deltas of {gw}: 2 snapshots, oldest first"
    assert "lakesync.wal.to=2 lakesync.wal.from=1" in lines[1]
    assert "lakesync.wal.to=5 lakesync.wal.from=3" in lines[2] and lines[2].endswith("[main]")

    # Bad parameters: one line each, exit status 2, before Spark is asked anything.
    _one_line_error(_invoke(["history", "nope", *where]), 2, "no table 'nope' in gateway")
    _one_line_error(_invoke(["query", sql, *where, "--snapshot", "42"]), 2, "unknown snapshot 42")
    _one_line_error(
        _invoke(["query", sql, *where, "--as-of", "2001-01-01"]),
        2,
        "is before the first snapshot of every table",
    )
    _one_line_error(_invoke(["query", sql, *where, "--as-of", "soon"]), 2, "bad timestamp 'soon'")
    _one_line_error(
        _invoke(["history", "todos", "--gw", "nosuch", "--data-dir", str(lake_dir)]),
        2,
        "no gateway 'nosuch' in the lake",
    )
    # Bad SQL: Spark's own word for it, on one line, exit status 1; nothing but a query runs.
    _one_line_error(_invoke(["query", "SELECT nope FROM todos", *where]), 1, "UNRESOLVED_COLUMN")
    _one_line_error(_invoke(["query", "DROP TABLE todos", *where]), 1, "not a query")
    # Just before the first state run the state table had no snapshot: named as such.
    before_state = str(snaps[0]["committed_ms"] - 1)
    _one_line_error(
        _invoke(["query", sql, *where, "--as-of", before_state]),
        1,
        "table 'todos' has no snapshot at",
    )
    assert spark.table(f"lakesync.{gw}.todos").count() == 3

    status = _invoke(["status", "--data-dir", str(lake_dir), "--wal-url", wal_url, "--gw", gw])
    assert status.exit_code == 0, status.output
    assert re.search(
        rf"^{gw} lake todos: \d+ data files, \d+ delete files, \d+ bytes, \d+ records, "
        "2 snapshots, never compacted$",
        status.stdout,
        re.M,
    ), status.stdout
    assert f"{gw} lake lakesync_deltas: 2 data files, 0 delete files" in status.stdout
