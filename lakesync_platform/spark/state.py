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
    table_exists,
)
from .snapshots import current_snapshot

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "StateResult",
    "fold_log",
    "merge_states",
    "parse_log_columns",
    "state_table_exists",
    "state_watermark",
    "update_state",
]

_STRING_MARK = "\u0001"
# msgspec writes each effective column as {"column":"<ident>","value":<json>} (compact, in that
# key order). Spark's JSON parser hands string values back unquoted, so for json-typed columns a
# string value is marked with U+0001 right after that structural prefix, which tells the string
# "5" from the number 5. Only entries that carry a json-typed column pay for the regex.


def _value_prefix(names: list[str]) -> str:
    alternatives = "|".join(names)
    return rf'("column"\s*:\s*"(?:{alternatives})"\s*,\s*"value"\s*:\s*")'


@dataclass(frozen=True, slots=True)
class StateResult:
    """What one state run did for one table: log range merged, rows touched, live among them.

    ``live_changed`` is ``-1`` after a first load (not counted, to keep that path one pass).
    """

    gateway_id: str
    table: str
    from_cursor: int
    to_cursor: int
    rows_changed: int
    live_changed: int
    seconds: float


def _client_key(col: Column) -> Column:
    from pyspark.sql import functions as F

    return F.encode(col, "UTF-16BE")


def _newer(h1: Column, c1: Column, h2: Column, c2: Column, *, ties: bool) -> Column:
    """Stamp (h1, c1) newer than (h2, c2) (or equal when ``ties``); a null stamp is oldest."""
    from pyspark.sql import functions as F

    k1, k2 = _client_key(c1), _client_key(c2)
    tie = (h1 == h2) & ((k1 >= k2) if ties else (k1 > k2))
    return (
        F.when(h1.isNull(), F.lit(False)).when(h2.isNull(), F.lit(True)).otherwise((h1 > h2) | tie)
    )


def _typed_value(raw: Column, typ: str) -> Column:
    """Raw JSON token text → the state column's value (json strings carry the U+0001 mark)."""
    from pyspark.sql import functions as F

    if typ == "number":
        return raw.cast("double")
    if typ == "boolean":
        return F.when(raw == "true", F.lit(True)).when(raw == "false", F.lit(False))
    if typ == "json":
        is_str = raw.startswith(_STRING_MARK)
        text = raw.substr(F.lit(2), F.length(raw))
        quoted = F.to_json(F.struct(text.alias("v")))
        return F.when(is_str, quoted.substr(F.lit(6), F.length(quoted) - 6)).otherwise(raw)
    return raw


def parse_log_columns(log: DataFrame, json_columns: list[str] | None = None) -> DataFrame:
    """Pure: add ``_m``, the entry's columns as ``map<column, raw JSON token text>``.

    Deletes get an empty map. String values of ``json_columns`` are prefixed with U+0001.
    """
    from pyspark.sql import functions as F

    text = F.col("columns")
    if json_columns:
        carries = F.lit(False)
        for name in json_columns:
            carries = carries | text.contains(f'"column":"{name}"')
        marked = F.regexp_replace(text, _value_prefix(json_columns), "$1\\\\u0001")
        text = F.when(carries, marked).otherwise(text)
    parsed = F.from_json(text, "array<struct<column:string,value:string>>")
    return log.withColumn("_m", F.map_from_entries(parsed))


def _finish(df: DataFrame, schema: TableSchema) -> DataFrame:
    """Clear columns not newer than the delete stamp, set ``live``, order the columns."""
    from pyspark.sql import functions as F

    dh, dc = F.col(DELETE_HLC_COL), F.col(DELETE_CLIENT_COL)
    out = df
    survivors = []
    for name, _ in synced_columns(schema):
        h, c = F.col(hlc_col(name)), F.col(client_col(name))
        keep = F.when(dh.isNull(), h.isNotNull()).otherwise(_newer(h, c, dh, dc, ties=False))
        out = out.withColumns(
            {
                name: F.when(keep, F.col(name)),
                hlc_col(name): F.when(keep, h),
                client_col(name): F.when(keep, c),
            }
        )
        survivors.append(F.col(hlc_col(name)).isNotNull())
    live = F.lit(False)
    for s in survivors:
        live = live | s
    out = out.withColumn(LIVE_COL, live)
    return out.select(*[F.col(q(n)).cast(t).alias(n) for n, t in state_columns(schema)])


def fold_log(log: DataFrame, schema: TableSchema) -> DataFrame:
    """Pure: change-log rows of ``schema.table`` → one partial state row per ``row_id``."""
    from pyspark.sql import functions as F

    json_columns = [name for name, typ in synced_columns(schema) if typ == "json"]
    entries = parse_log_columns(log.filter(F.col("table") == log_table(schema)), json_columns)
    entries = entries.withColumn("_k", _client_key(F.col("client_id")))
    is_delete = F.col("op") == DELETE
    key = F.col("_k")
    aggs = [
        F.max("cursor").alias(CURSOR_COL),
        F.max(F.when(is_delete, F.struct(F.col("hlc"), key.alias("k"), F.col("client_id")))).alias(
            "_del"
        ),
    ]
    cols = synced_columns(schema)
    for i, (name, _) in enumerate(cols):
        winner = F.struct(
            F.col("hlc"),
            key.alias("k"),
            F.col("cursor"),
            F.col("client_id"),
            F.col("_m").getItem(name).alias("raw"),
        )
        writes = ~is_delete & F.map_contains_key(F.col("_m"), name)
        aggs.append(F.max(F.when(writes, winner)).alias(f"_w{i}"))
    folded = entries.groupBy("row_id").agg(*aggs)
    projected = [
        F.col("row_id"),
        F.col(CURSOR_COL),
        F.col("_del.hlc").alias(DELETE_HLC_COL),
        F.col("_del.client_id").alias(DELETE_CLIENT_COL),
    ]
    for i, (name, typ) in enumerate(cols):
        projected += [
            _typed_value(F.col(f"_w{i}.raw"), typ).alias(name),
            F.col(f"_w{i}.hlc").alias(hlc_col(name)),
            F.col(f"_w{i}.client_id").alias(client_col(name)),
        ]
    return _finish(folded.select(*projected), schema)


def merge_states(current: DataFrame, incoming: DataFrame, schema: TableSchema) -> DataFrame:
    """Pure: join ``incoming`` partial states into ``current`` for the rows ``incoming`` touches.

    Both frames have the state-table layout; equal stamps resolve to ``incoming`` (it holds the
    later log entries). Returns one merged state row per ``row_id`` of ``incoming``.
    """
    from pyspark.sql import functions as F

    cur = current.select(*[F.col(q(n)).alias(f"c_{n}") for n, _ in state_columns(schema)])
    inc = incoming.select(*[F.col(q(n)).alias(f"i_{n}") for n, _ in state_columns(schema)])
    joined = inc.join(cur, F.col("i_row_id") == F.col("c_row_id"), "left")

    def i(n: str) -> Column:
        return F.col(q(f"i_{n}"))

    def c(n: str) -> Column:
        return F.col(q(f"c_{n}"))

    del_wins = _newer(
        i(DELETE_HLC_COL), i(DELETE_CLIENT_COL), c(DELETE_HLC_COL), c(DELETE_CLIENT_COL), ties=True
    )
    out = [
        i("row_id").alias("row_id"),
        F.greatest(i(CURSOR_COL), c(CURSOR_COL)).alias(CURSOR_COL),
        F.when(del_wins, i(DELETE_HLC_COL)).otherwise(c(DELETE_HLC_COL)).alias(DELETE_HLC_COL),
        F.when(del_wins, i(DELETE_CLIENT_COL))
        .otherwise(c(DELETE_CLIENT_COL))
        .alias(DELETE_CLIENT_COL),
    ]
    for name, _ in synced_columns(schema):
        h, cl = hlc_col(name), client_col(name)
        wins = _newer(i(h), i(cl), c(h), c(cl), ties=True)
        out += [
            F.when(wins, i(name)).otherwise(c(name)).alias(name),
            F.when(wins, i(h)).otherwise(c(h)).alias(h),
            F.when(wins, i(cl)).otherwise(c(cl)).alias(cl),
        ]
    return _finish(joined.select(*out), schema)


def state_watermark(spark: SparkSession, table_name: str) -> int:
    """The last log cursor merged into a state table (0 when empty)."""
    value = spark.sql(f"SELECT max({q(CURSOR_COL)}) AS m FROM {table_name}").collect()[0]["m"]
    return int(value or 0)


def update_state(
    spark: SparkSession,
    gw: str,
    schema: TableSchema,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> StateResult:
    """Merge the log entries of ``schema.table`` after the state watermark into its state table.

    Idempotent: re-merging entries changes nothing (the merge is a join), and the watermark is
    part of the state rows themselves (``max(_ls$cursor)``), so it commits atomically with them.
    """
    from pyspark.sql import functions as F

    from .flush import lake_watermark

    started = clock()
    target = ensure_state_table(spark, gw, schema)
    log_name = ensure_deltas_table(spark, gw)
    mark = state_watermark(spark, target)
    upper = lake_watermark(spark, gw).cursor  # pins the batch: (mark, upper]
    if upper <= mark:
        return StateResult(gw, schema.table, mark + 1, mark, 0, 0, clock() - started)
    batch = spark.table(log_name).filter(
        (F.col("table") == log_table(schema))
        & (F.col("cursor") > F.lit(mark))
        & (F.col("cursor") <= F.lit(upper))
    )
    incoming = fold_log(batch, schema)
    before = current_snapshot(spark, target)
    if mark == 0 and (before is None or before.int_prop("total-records") == 0):
        # First load: the folded batch *is* the state — one append, no join, no cache. (Runs
        # of one gateway are serialised, see assets/; a concurrent first load is not expected.)
        incoming.writeTo(target).append()
        after = current_snapshot(spark, target)
        rows = 0 if after is None else after.int_prop("added-records")
        top = state_watermark(spark, target) if rows else mark
        return StateResult(gw, schema.table, mark + 1, top, rows, -1, clock() - started)
    merged = merge_states(spark.table(target), incoming, schema).cache()
    try:
        stats = merged.agg(
            F.count("*").alias("rows"),
            F.count_if(F.col(q(LIVE_COL))).alias("live"),
            F.max(q(CURSOR_COL)).alias("top"),
        ).collect()[0]
        changed = int(stats["rows"])
        if changed == 0:
            return StateResult(gw, schema.table, mark + 1, mark, 0, 0, clock() - started)
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
    )


def state_table_exists(spark: SparkSession, gw: str, table: str) -> bool:
    """Whether ``table`` has a state table in ``gw``'s namespace."""
    from .layout import state_table

    return table_exists(spark, state_table(gw, table))
