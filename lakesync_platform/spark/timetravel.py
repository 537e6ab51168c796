"""Time travel: Spark SQL over a gateway's lake tables as they were at one moment or snapshot.

A query names the gateway's tables unqualified (``todos``, ``lakesync_deltas``); each name is a
temporary view of that table read at the snapshot chosen for it (:func:`pin_tables`):

* no time given — every table at its current snapshot;
* ``as_of_ms`` — every table at the snapshot that was current then (Iceberg's
  ``TIMESTAMP AS OF``); a table without one then (created later, or its snapshots expired) has
  no view, and a query naming it fails saying so;
* ``snapshot_id`` — the table that holds that snapshot at exactly it, the others as of the
  moment it was committed: the whole lake as that commit left it.

Only a query runs (``SELECT``, ``WITH … SELECT``, ``VALUES``, ``TABLE``): the text is run as a
subquery, ``SELECT * FROM (<text>) LIMIT n``, so what Spark parses is a query whatever the text
says — ``DROP``, ``INSERT``, ``CALL`` and the like fail to parse there and are refused before
anything executes (a statement Spark would run eagerly never reaches it on its own). This needs
no parser of our own nor Spark's JVM parser, so it works through Spark Connect as on a classic
session. Names qualified with the catalog (``lakesync.<gw>.<table>``) read the table's current
snapshot, not the pinned one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..core.errors import NotFoundError, ValidationError
from .arrow import collect_arrow
from .history import TableHistory
from .java_errors import message_parameter, one_line

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = [
    "Pin",
    "Pins",
    "QueryResult",
    "format_ms",
    "parse_as_of",
    "pin_tables",
    "run_query",
]


@dataclass(frozen=True, slots=True)
class Pin:
    """A table read at one snapshot (``None``: a table that has no snapshot yet, read empty)."""

    table: str
    snapshot_id: int | None
    timestamp_ms: int | None


@dataclass(frozen=True, slots=True)
class Pins:
    """The tables a query may name, each at its snapshot, and why the others may not."""

    pinned: tuple[Pin, ...]
    missing: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A query's rows (at most the limit; ``truncated`` when there were more) and the
    snapshots its tables were read at."""

    rows: pa.Table
    truncated: bool
    pins: Pins


def format_ms(ms: int) -> str:
    """``1767000000123`` → ``2025-12-29 09:20:00.123 UTC``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


_DIGITS = re.compile(r"\d{10,}")


def parse_as_of(text: str) -> int:
    """An ``--as-of`` value → milliseconds since the epoch.

    ISO 8601 (``2026-01-31``, ``2026-01-31 12:00``, ``2026-01-31T12:00:00.5+01:00``; UTC when
    it names no offset) or milliseconds since the epoch (``1767000000000``).
    """
    value = text.strip()
    if _DIGITS.fullmatch(value):
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(
            f"bad timestamp {text!r}: give ISO 8601 (2026-01-31 12:00:00, UTC unless an "
            "offset is named) or milliseconds since the epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def pin_tables(
    histories: Mapping[str, TableHistory],
    gw: str,
    *,
    as_of_ms: int | None = None,
    snapshot_id: int | None = None,
) -> Pins:
    """Pure: the snapshot each table is read at (module docstring). Raises
    :class:`NotFoundError` for a snapshot no table holds, or a moment before every table's
    oldest snapshot."""
    if as_of_ms is not None and snapshot_id is not None:
        raise ValidationError("give --as-of or --snapshot, not both")
    if snapshot_id is not None:
        owners = [t for t, h in histories.items() if h.snapshot(snapshot_id) is not None]
        if not owners:
            raise NotFoundError(
                f"unknown snapshot {snapshot_id} in gateway {gw!r} (see lakesync history TABLE)"
            )
        entry = histories[owners[0]].snapshot(snapshot_id)
        assert entry is not None
        pins = _as_of(histories, entry.timestamp_ms)
        pinned = [p for p in pins.pinned if p.table != owners[0]]
        pinned.append(Pin(owners[0], snapshot_id, entry.timestamp_ms))
        missing = {t: why for t, why in pins.missing.items() if t != owners[0]}
        return Pins(tuple(sorted(pinned, key=lambda p: p.table)), missing)
    if as_of_ms is None:
        return Pins(
            tuple(
                Pin(
                    t,
                    h.current_id,
                    None if h.current is None else h.current.timestamp_ms,
                )
                for t, h in sorted(histories.items())
            ),
            {},
        )
    pins = _as_of(histories, as_of_ms)
    if not pins.pinned:
        firsts = [f for h in histories.values() if (f := h.first_log_ms()) is not None]
        oldest = f"; the oldest snapshot kept is from {format_ms(min(firsts))}" if firsts else ""
        raise NotFoundError(
            f"{format_ms(as_of_ms)} is before the first snapshot of every table of gateway "
            f"{gw!r}{oldest}"
        )
    return pins


def _as_of(histories: Mapping[str, TableHistory], as_of_ms: int) -> Pins:
    pinned = []
    missing = {}
    for table, history in sorted(histories.items()):
        entry = history.as_of(as_of_ms)
        if entry is not None:
            pinned.append(Pin(table, entry.snapshot_id, entry.timestamp_ms))
            continue
        first = history.first_log_ms()
        missing[table] = (
            f"table {table!r} has no snapshot yet"
            if first is None
            else f"table {table!r} has no snapshot at {format_ms(as_of_ms)} "
            f"(its oldest kept is from {format_ms(first)})"
        )
    return Pins(tuple(pinned), missing)


_TRAILING = re.compile(r"[\s;]+$")


def _as_subquery(sql: str, limit: int) -> str:
    """Pure: ``sql`` as the subquery of a bounded query — whatever it says, the statement is a
    query (a trailing ``;`` is dropped; the newlines end a trailing ``--`` comment)."""
    return f"SELECT * FROM (\n{_TRAILING.sub('', sql)}\n) AS lakesync_query LIMIT {int(limit)}"


def run_query(
    spark: SparkSession,
    namespace: str,
    sql: str,
    pins: Pins,
    *,
    max_rows: int,
) -> QueryResult:
    """Run ``sql`` over the tables of ``namespace`` (quoted, e.g. ``lakesync.`demo```) read at
    ``pins``; at most ``max_rows`` rows come back. Failures raise one-line
    :class:`ValidationError` / :class:`NotFoundError`."""
    from pyspark.errors import ParseException

    views = []
    try:
        for pin in pins.pinned:
            reader = spark.read
            if pin.snapshot_id is not None:
                reader = reader.option("snapshot-id", str(pin.snapshot_id))
            name = "`" + pin.table.replace("`", "``") + "`"
            reader.table(f"{namespace}.{name}").createOrReplaceTempView(pin.table)
            views.append(pin.table)
        try:
            rows = collect_arrow(spark.sql(_as_subquery(sql, max_rows + 1)))
        except ParseException as exc:  # not one query (or not SQL): refused, nothing ran
            raise ValidationError(f"not a query lakesync query runs: {one_line(exc)}") from None
        except Exception as exc:  # analysis / runtime errors: one line, no Java stack trace
            raise _query_error(exc, pins) from None
    finally:
        for view in views:
            spark.catalog.dropTempView(view)
    truncated = rows.num_rows > max_rows
    return QueryResult(rows.slice(0, max_rows), truncated, pins)


def _query_error(exc: Exception, pins: Pins) -> Exception:
    """A missing pinned table named as such; anything else as Spark said it, on one line."""
    relation = message_parameter(exc, "relationName")
    if relation is not None:
        name = relation.strip("`")
        if name in pins.missing:
            return NotFoundError(pins.missing[name])
    return ValidationError(f"query failed: {one_line(exc)}")
