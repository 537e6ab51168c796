"""Reading the lake back from the command line: ``lakesync query``, ``lakesync history`` and the
lake lines of ``lakesync status``.

Settings are read here, at the process edge. Bad parameters — an unknown gateway, table or
snapshot, a timestamp before the first snapshot, a malformed timestamp — stop the command with
one line and exit status 2 before Spark starts (the table metadata is read with pyiceberg,
:mod:`lakesync_platform.pipeline.timetravel`). SQL that is not one query, that Spark rejects or
that fails while it runs exits 1, again with one line. No Java stack trace reaches the
terminal: the JVM's log goes to ``<data-dir>/logs/spark.log``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import LakeSyncError, NotFoundError, ValidationError
from .checks import NotReady, require_data_dir
from .options import data_dir_option
from .progress import Progress, libraries_logged_to

if TYPE_CHECKING:
    from ..pipeline.timetravel import LakeReader, Pins, QueryResult, TableHistory

__all__ = ["history", "lake_status_lines", "query"]

_NOISE = {"spark.app.id", "app-id", "engine-name", "engine-version", "iceberg-version"}
"""Summary keys every Spark commit repeats, left out of the human listing (``--json`` has all)."""


def _reader(data_dir: Path) -> tuple[LakeReader, Path]:
    """A lake reader over ``data_dir`` (settings from the environment) and the run log."""
    from ..pipeline.context import PipelineContext
    from ..pipeline.timetravel import LakeReader
    from ..settings import PipelineSettings

    require_data_dir(data_dir)
    try:
        settings = PipelineSettings.from_env(os.environ, data_dir=str(data_dir))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    return LakeReader(PipelineContext(settings)), settings.layout.run_log


@click.command()
@click.argument("sql")
@click.option("--as-of", "as_of", help="Read every table as it was then (ISO 8601, UTC; or ms).")
@click.option("--snapshot", "snapshot", type=int, help="Read the lake as this commit left it.")
@click.option("--gw", help="Gateway id (default: the lake's only gateway).")
@data_dir_option
@click.option("--max-rows", default=1000, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def query(
    sql: str,
    as_of: str | None,
    snapshot: int | None,
    gw: str | None,
    data_dir: Path,
    max_rows: int,
    as_json: bool,
) -> None:
    """Run a Spark SQL query over a gateway's lake tables, now or as they were (--as-of a
    moment, or --snapshot a commit). Tables are named unqualified: todos, lakesync_deltas."""
    from ..pipeline.timetravel import QueryRequest, parse_as_of

    reader, run_log = _reader(data_dir)
    progress = Progress(quiet=as_json)
    with libraries_logged_to(run_log):
        try:
            as_of_ms = None if as_of is None else parse_as_of(as_of)
            request = QueryRequest(sql, as_of_ms, snapshot, max_rows)
            gateway = reader.require_gateway(gw)
            pins = reader.pins(gateway, request)
        except (NotFoundError, ValidationError) as exc:
            raise NotReady(exc.message) from exc
        if not as_json:
            for line in _pin_lines(pins):
                click.echo(line, err=True)
        try:
            with progress.step(f"starting Spark (JVM log: {reader.ctx.settings.layout.spark_log})"):
                reader.ctx.spark  # noqa: B018 — started here, so its time is shown apart
            with progress.step("query"):
                result = reader.query(gateway, request, pins)
        except LakeSyncError as exc:  # what Spark said about the SQL: exit 1
            raise click.ClickException(exc.message) from exc
    click.echo(_query_json(gateway, result) if as_json else _query_text(result))


@click.command()
@click.argument("table")
@click.option("--gw", help="Gateway id (default: the lake's only gateway).")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def history(table: str, gw: str | None, data_dir: Path, as_json: bool) -> None:
    """List a lake table's snapshots, oldest first, with their summaries (read with
    pyiceberg: no Spark)."""
    reader, run_log = _reader(data_dir)
    with libraries_logged_to(run_log):
        try:
            gateway = reader.require_gateway(gw)
            found = reader.history(gateway, table)
        except (NotFoundError, ValidationError) as exc:
            raise NotReady(exc.message) from exc
        except LakeSyncError as exc:
            raise click.ClickException(exc.message) from exc
    if as_json:
        click.echo(json.dumps(_history_doc(gateway, table, found)))
        return
    click.echo(f"{table} of {gateway}: {len(found.snapshots)} snapshots, oldest first")
    for line in _history_lines(found):
        click.echo(line)


def _pin_lines(pins: Pins) -> list[str]:
    from ..pipeline.timetravel import format_ms

    lines = []
    for pin in pins.pinned:
        if pin.snapshot_id is None:
            lines.append(f"{pin.table}: no snapshot yet (empty)")
        else:
            assert pin.timestamp_ms is not None
            lines.append(f"{pin.table} @ {pin.snapshot_id} ({format_ms(pin.timestamp_ms)})")
    return lines


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _query_text(result: QueryResult) -> str:
    """The rows as an aligned text table, then the row count."""
    names = result.rows.column_names
    rows = [[_cell(v) for v in row.values()] for row in result.rows.to_pylist()]
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]
    out = [" | ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip()]
    out.append("-+-".join("-" * w for w in widths))
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    more = f"; more rows not shown (--max-rows {len(rows)})" if result.truncated else ""
    out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'}{more})")
    return "\n".join(out)


def _query_json(gw: str, result: QueryResult) -> str:
    from ..pipeline.timetravel import format_ms

    doc = {
        "gateway": gw,
        "tables": [
            {
                "table": p.table,
                "snapshot_id": p.snapshot_id,
                "committed_at": None if p.timestamp_ms is None else format_ms(p.timestamp_ms),
            }
            for p in result.pins.pinned
        ],
        "columns": result.rows.column_names,
        "rows": [list(r.values()) for r in result.rows.to_pylist()],
        "truncated": result.truncated,
    }
    return json.dumps(doc, default=str)


def _history_lines(found: TableHistory) -> list[str]:
    from ..pipeline.timetravel import format_ms

    pinned = found.pinned()
    lines = []
    for snap in found.snapshots:
        refs = list(pinned.get(snap.snapshot_id, []))
        if snap.snapshot_id == found.current_id and "main" not in refs:
            refs.insert(0, "current")
        summary = " ".join(f"{k}={v}" for k, v in snap.summary.items() if k not in _NOISE)
        marks = f"  [{', '.join(refs)}]" if refs else ""
        lines.append(
            f"{snap.snapshot_id}  {format_ms(snap.timestamp_ms)}  {snap.operation:<9} "
            f"{summary}{marks}"
        )
    return lines


def _history_doc(gw: str, table: str, found: TableHistory) -> dict[str, Any]:
    from ..pipeline.timetravel import format_ms

    pinned = found.pinned()
    return {
        "gateway": gw,
        "table": table,
        "current_snapshot_id": found.current_id,
        "snapshots": [
            {
                "snapshot_id": s.snapshot_id,
                "parent_id": s.parent_id,
                "committed_ms": s.timestamp_ms,
                "committed_at": format_ms(s.timestamp_ms),
                "operation": s.operation,
                "summary": dict(s.summary),
                "refs": pinned.get(s.snapshot_id, []),
            }
            for s in found.snapshots
        ],
    }


def lake_status_lines(
    data_dir: Path, gateways: Sequence[str], env: Mapping[str, str], now_ms: int
) -> list[str]:
    """``lakesync status``'s lake lines: per table of each gateway, files, bytes, snapshots
    and when upkeep last compacted it (metadata read with pyiceberg; nothing is created)."""
    import logging

    from ..pipeline.context import PipelineContext
    from ..pipeline.timetravel import LakeReader
    from ..settings import PipelineSettings

    logging.getLogger("pyiceberg").addHandler(logging.NullHandler())  # its notices: not here
    reader = LakeReader(PipelineContext(PipelineSettings.from_env(env, data_dir=str(data_dir))))
    try:
        if reader.catalog is None:
            return ["lake: its catalog is read through Spark (see lakesync history TABLE)"]
        known = set(reader.gateways())
    except NotFoundError:
        return ["lake: nothing flushed yet"]
    except Exception as exc:  # the catalog's own failure, on one line
        return [f"lake: unreadable ({type(exc).__name__}: {str(exc).splitlines()[0]})"]
    lines = []
    for gw in gateways:
        if gw not in known:
            lines.append(f"{gw} lake: nothing flushed yet")
            continue
        for summary in reader.summaries(gw):
            files, last = summary.files, summary.last_upkeep_ms
            when = "never compacted" if last is None else f"compacted {_ago(now_ms - last)} ago"
            lines.append(
                f"{gw} lake {summary.table}: {files.data_files} data files, "
                f"{files.delete_files} delete files, {files.bytes} bytes, {files.records} "
                f"records, {files.snapshots} snapshots, {when}"
            )
    return lines


def _ago(ms: int) -> str:
    seconds = max(0, ms // 1000)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
