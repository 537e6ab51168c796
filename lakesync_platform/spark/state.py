"""State: new log entries → one Iceberg state table per table (``MERGE INTO``, per-column LWW).

The state reproduces :mod:`lakesync_platform.core.merge` exactly. Row state is a join of
per-column registers (value + stamp ``(hlc, client_id)``) and a max-register for the delete stamp,
so a batch of log entries can be folded into a partial state per row (:func:`fold_log`) and
joined with the current state (:func:`merge_states`) in any grouping:

* per column the newest stamp wins; stamps order by HLC, then ``client_id`` in JavaScript
  (UTF-16 code unit) order — compared here as ``encode(client_id, 'UTF-16BE')`` bytes;
* equal stamps on one column (a client rewriting a value at the same HLC) are resolved in the WAL
  by the canonical JSON of the value, and only the winner is logged, so in the log the *later
  cursor* always holds the winner — the fold orders ties by cursor, the merge lets the newer batch
  win ties;
* the row's delete stamp is the newest delete; a column survives only if its stamp is newer than
  it; the row is live while any column survives.

Both transforms are pure ``DataFrame -> DataFrame`` functions; :func:`update_state` is the thin
entry point that reads the batch after the state table's own watermark and commits one
``MERGE INTO``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.delta import DELETE
from ..core.schema import TableSchema
from .layout import (
    CURSOR_COL,
    DELETE_CLIENT_COL,
    DELETE_HLC_COL,
    LIVE_COL,
    client_col,
    ensure_deltas_table,
    ensure_state_table,
    hlc_col,
    log_table,
    q,
    state_columns,
    synced_columns,
)
from .snapshots import current_snapshot

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, Row, SparkSession

__all__ = [
    "StateResult",
    "fold_log",
    "merge_states",
    "state_watermark",
    "update_state",
]

_SPLIT = str(8 << 20)
# msgspec writes each effective column as {"column":"<ident>","value":<json>} (compact, in that
# key order). Spark's JSON parser hands string values back unquoted, which loses the difference
# between the string "5" and the number 5 — fine for typed columns, not for json-typed ones. For
# those the raw value token is taken from the entry's top-level elements instead: parsed as
# ``array<string>``, each element comes back as its own JSON text, and the token follows the
# fixed ``{"column":"<ident>","value":`` prefix. (Text matching on the whole entry cannot tell
# a top-level element from an equal-looking object nested inside another json value.) Only
# entries that mention a json-typed column pay for that second parse.


@dataclass(frozen=True, slots=True)
class StateResult:
    """What one state run did for one table: log range merged, rows touched, live among them,
    and the state table's snapshot after the run (read the run's output back with ``lakesync
    query --snapshot``)."""

    gateway_id: str
    table: str
    from_cursor: int
    to_cursor: int
    rows_changed: int
    live_changed: int
    seconds: float
    snapshot_id: int | None = None


# The transforms below are written as SQL expression text (``selectExpr`` / ``expr``): one
# expression per output column, where the same plan built from ``Column`` objects costs a py4j
# round trip per function call on a classic session (hundreds per table, a noticeable part of a
# small run) and a larger plan to send through Spark Connect.


def _key(client: str) -> str:
    """SQL: a client id's sort key, its UTF-16 code units (JavaScript string order)."""
    return f"encode({client}, 'UTF-16BE')"


def _newer(h1: str, c1: str, h2: str, c2: str, *, ties: bool) -> str:
    """SQL: stamp (h1, c1) newer than (h2, c2) (or equal when ``ties``); a null stamp is oldest."""
    op = ">=" if ties else ">"
    return (
        f"(CASE WHEN {h1} IS NULL THEN false WHEN {h2} IS NULL THEN true "
        f"ELSE ({h1} > {h2} OR ({h1} = {h2} AND {_key(c1)} {op} {_key(c2)})) END)"
    )


def _typed_value(raw: str, typ: str) -> str:
    """SQL: raw JSON token text → the state column's value (json: the token itself)."""
    if typ == "number":
        return f"CAST({raw} AS DOUBLE)"
    if typ == "boolean":
        return f"(CASE WHEN {raw} = 'true' THEN true WHEN {raw} = 'false' THEN false END)"
    return raw


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


_ENTRY_TYPE = "'array<struct<column:string,value:string>>'"
_PARSED = f"map_from_entries(from_json(`columns`, {_ENTRY_TYPE}))"
"""SQL: the entry's ``columns`` as ``map<column, value text>`` (strings unquoted; deletes get an
empty map)."""


def _json_prefix(name: str) -> str:
    return '{"column":"' + name + '","value":'


def _elements(json_columns: list[str]) -> str:
    """SQL: the entry's top-level elements as JSON texts when it may carry one of
    ``json_columns``, else null."""
    if not json_columns:
        return "CAST(NULL AS array<string>)"
    needles = [_sql_string('"column":"' + name + '"') for name in json_columns]
    carries = " OR ".join(f"contains(`columns`, {needle})" for needle in needles)
    return f"(CASE WHEN {carries} THEN from_json(`columns`, 'array<string>') END)"


def _json_token(name: str) -> str:
    """SQL: the raw JSON token of json-typed column ``name`` in an entry (the last element that
    sets it, as in the map); the unquoted map value should the element not have the usual
    layout."""
    prefix = _json_prefix(name)
    start = len(prefix) + 1
    token = (
        f"element_at(transform(filter(_e, e -> startswith(e, {_sql_string(prefix)})), "
        f"e -> substring(e, {start}, length(e) - {start})), -1)"
    )
    return f"coalesce({token}, _m[{_sql_string(name)}])"


def _finish(schema: TableSchema) -> tuple[list[str], list[str]]:
    """SQL select lists, applied one after the other: first ``*`` plus per column whether it
    survives the row's delete stamp (``_keep<i>``), then the state columns — survivors kept,
    the rest cleared, ``live`` set, cast and in table order."""
    dh, dc = q(DELETE_HLC_COL), q(DELETE_CLIENT_COL)
    keeps = ["*"]
    exprs: dict[str, str] = {
        "row_id": "row_id",
        CURSOR_COL: q(CURSOR_COL),
        DELETE_HLC_COL: dh,
        DELETE_CLIENT_COL: dc,
    }
    survivors = []
    for i, (name, _) in enumerate(synced_columns(schema)):
        h, c = q(hlc_col(name)), q(client_col(name))
        newer = _newer(h, c, dh, dc, ties=False)
        keeps.append(f"(CASE WHEN {dh} IS NULL THEN {h} IS NOT NULL ELSE {newer} END) AS _keep{i}")
        exprs[name] = f"CASE WHEN _keep{i} THEN {q(name)} END"
        exprs[hlc_col(name)] = f"CASE WHEN _keep{i} THEN {h} END"
        exprs[client_col(name)] = f"CASE WHEN _keep{i} THEN {c} END"
        survivors.append(f"_keep{i}")
    exprs[LIVE_COL] = " OR ".join(survivors) if survivors else "false"
    return keeps, [f"CAST({exprs[n]} AS {t}) AS {q(n)}" for n, t in state_columns(schema)]


def fold_log(log: DataFrame, schema: TableSchema) -> DataFrame:
    """Pure: change-log rows of ``schema.table`` → one partial state row per ``row_id``.

    Built from SQL expression text on ``log`` itself, with no temporary view: the frame stays
    valid for as long as it is used (a Spark Connect plan, and a ``writeTo`` on a classic
    session, are analysed again when they run)."""
    cols = synced_columns(schema)
    json_columns = [name for name, typ in cols if typ == "json"]
    stamp = "'hlc', hlc, 'k', _k, 'client_id', client_id"
    aggs = [
        f"max(cursor) AS {q(CURSOR_COL)}",
        f"max(CASE WHEN op = '{DELETE}' THEN named_struct({stamp}) END) AS _del",
    ]
    for i, (name, typ) in enumerate(cols):
        key = _sql_string(name)
        raw = _json_token(name) if typ == "json" else f"_m[{key}]"
        aggs.append(
            f"max(CASE WHEN op <> '{DELETE}' AND map_contains_key(_m, {key}) "
            "THEN named_struct('hlc', hlc, 'k', _k, 'cursor', cursor, 'client_id', client_id, "
            f"'raw', {raw}) END) AS _w{i}"
        )
    projected = [
        "row_id",
        q(CURSOR_COL),
        f"_del.hlc AS {q(DELETE_HLC_COL)}",
        f"_del.client_id AS {q(DELETE_CLIENT_COL)}",
    ]
    for i, (name, typ) in enumerate(cols):
        projected += [
            f"{_typed_value(f'_w{i}.raw', typ)} AS {q(name)}",
            f"_w{i}.hlc AS {q(hlc_col(name))}",
            f"_w{i}.client_id AS {q(client_col(name))}",
        ]
    # Struct fields compare in order: hlc, then the client key, then the cursor (the later log
    # entry wins an exact tie, see the module docstring).
    from pyspark.sql import functions as F

    keeps, finished = _finish(schema)
    entries = log.where(f"`table` = {_sql_string(log_table(schema))}").selectExpr(
        "row_id",
        "cursor",
        "op",
        "client_id",
        "hlc",
        f"{_PARSED} AS _m",
        f"{_elements(json_columns)} AS _e",
        f"{_key('client_id')} AS _k",
    )
    folded = entries.groupBy("row_id").agg(*(F.expr(agg) for agg in aggs))
    return folded.selectExpr(*projected).selectExpr(*keeps).selectExpr(*finished)


def merge_states(current: DataFrame, incoming: DataFrame, schema: TableSchema) -> DataFrame:
    """Pure: join ``incoming`` partial states into ``current`` for the rows ``incoming`` touches.

    Both frames have the state-table layout; equal stamps resolve to ``incoming`` (it holds the
    later log entries). Returns one merged state row per ``row_id`` of ``incoming``.
    """

    def i(n: str) -> str:
        return f"i.{q(n)}"

    def c(n: str) -> str:
        return f"c.{q(n)}"

    dh, dc = DELETE_HLC_COL, DELETE_CLIENT_COL
    del_wins = _newer(i(dh), i(dc), c(dh), c(dc), ties=True)
    out = [
        "i.row_id AS row_id",
        f"greatest({i(CURSOR_COL)}, {c(CURSOR_COL)}) AS {q(CURSOR_COL)}",
        f"CASE WHEN {del_wins} THEN {i(dh)} ELSE {c(dh)} END AS {q(dh)}",
        f"CASE WHEN {del_wins} THEN {i(dc)} ELSE {c(dc)} END AS {q(dc)}",
    ]
    for name, _ in synced_columns(schema):
        h, cl = hlc_col(name), client_col(name)
        wins = _newer(i(h), i(cl), c(h), c(cl), ties=True)
        for n in (name, h, cl):
            out.append(f"CASE WHEN {wins} THEN {i(n)} ELSE {c(n)} END AS {q(n)}")
    from pyspark.sql import functions as F

    joined = incoming.alias("i").join(current.alias("c"), F.expr("i.row_id = c.row_id"), "left")
    keeps, finished = _finish(schema)
    return joined.selectExpr(*out).selectExpr(*keeps).selectExpr(*finished)


def state_watermark(spark: SparkSession, table_name: str) -> int:
    """The last log cursor merged into a state table (0 when empty)."""
    value = spark.sql(f"SELECT max({q(CURSOR_COL)}) AS m FROM {table_name}").collect()[0]["m"]
    return int(value or 0)


def update_state(
    spark: SparkSession,
    catalog: Catalog,
    gw: str,
    schema: TableSchema,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> StateResult:
    """Merge the log entries of ``schema.table`` after the state watermark into its state table.

    Idempotent: re-merging entries changes nothing (the merge is a join), and the watermark is
    part of the state rows themselves (``max(_ls$cursor)``), so it commits atomically with them.
    ``catalog`` (pyiceberg over the session's catalog) reads the snapshots.
    """
    from pyspark.sql import functions as F

    from .flush import lake_watermark

    started = clock()
    target = ensure_state_table(spark, gw, schema)
    log_name = ensure_deltas_table(spark, gw)
    before = current_snapshot(catalog, target)
    # State rows are never removed (a delete marks them dead), so no records means no state.
    empty = before is None or before.int_prop("total-records") == 0
    mark = 0 if empty else state_watermark(spark, target)
    lake = lake_watermark(spark, gw, catalog)
    upper = lake.cursor
    unchanged = None if before is None else before.snapshot_id
    if upper <= mark or lake.snapshot_id is None:
        return StateResult(gw, schema.table, mark + 1, mark, 0, 0, clock() - started, unchanged)
    # The batch is (mark, upper]: the log as of the snapshot the lake watermark was read at
    # holds exactly the entries up to ``upper`` (flushes commit contiguous WAL ranges), so only
    # ``mark`` needs a filter — none on a first load, which keeps that plan's generated code the
    # same from run to run. One task per log file (a flush writes one per core).
    snapshot = str(lake.snapshot_id)
    options = {"split-size": _SPLIT, "file-open-cost": _SPLIT, "snapshot-id": snapshot}
    batch = spark.read.options(**options).table(log_name)  # fold_log keeps this table's rows
    if mark:
        batch = batch.filter(F.col("cursor") > F.lit(mark))
    incoming = fold_log(batch, schema)
    if empty:
        # First load: the folded batch *is* the state — one append, no join, no cache. Its
        # figures come from one aggregate of the two narrow columns of the snapshot it wrote
        # (``Observation``, which gathered them during the write, is not implemented by Spark
        # Connect 3.5; a first load happens once per table). Stages of one lake hold its lock,
        # lakesync_platform/pipeline/lock.py: no other commit lands meanwhile.
        incoming.writeTo(target).append()
        written = _current(catalog, target)
        if written is None:
            return StateResult(gw, schema.table, mark + 1, mark, 0, 0, clock() - started, None)
        first = _figures(spark.read.option("snapshot-id", str(written)).table(target))
        rows = int(first["rows"])
        top = int(first["top"]) if rows else mark
        live = int(first["live"])
        return StateResult(gw, schema.table, mark + 1, top, rows, live, clock() - started, written)
    merged = merge_states(spark.table(target), incoming, schema).cache()
    try:
        stats = _figures(merged)
        changed = int(stats["rows"])
        if changed == 0:
            return StateResult(gw, schema.table, mark + 1, mark, 0, 0, clock() - started, unchanged)
        view = f"lakesync_state_src_{uuid.uuid4().hex}"
        merged.createOrReplaceTempView(view)
        spark.sql(
            f"MERGE INTO {target} t USING {view} s ON t.row_id = s.row_id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        spark.catalog.dropTempView(view)
    finally:
        merged.unpersist()
    return StateResult(
        gw,
        schema.table,
        mark + 1,
        int(stats["top"]),
        changed,
        int(stats["live"]),
        clock() - started,
        _current(catalog, target),
    )


def _figures(state: DataFrame) -> Row:
    """One row of a run's figures over state rows: ``rows``, ``live`` and ``top`` (cursor)."""
    from pyspark.sql import functions as F

    return state.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count_if(F.col(q(LIVE_COL))).alias("live"),
        F.max(q(CURSOR_COL)).alias("top"),
    ).collect()[0]


def _current(catalog: Catalog, table_name: str) -> int | None:
    """The table's current snapshot id (what a run just committed)."""
    snapshot = current_snapshot(catalog, table_name)
    return None if snapshot is None else snapshot.snapshot_id
