"""The pipeline checks' Spark side: aggregates and joins over a cursor range of the lake.

A check looks at a :class:`CursorRange` of WAL cursors — what the latest flush committed
(:func:`latest_flush_range`, the snapshot summary's ``lakesync.wal.from`` / ``lakesync.wal.to``),
or everything up to the lake watermark (:func:`whole_log_range`, the audit). Every query filters
the change log on ``cursor`` and the state tables on ``_ls$cursor``, so Iceberg prunes the data
files a range cannot touch and a check of one run costs what the run wrote, not the lake. Only
counts and a sample of (at most :data:`SAMPLE`) ids reach the driver; the destination check
streams state rows in batches (:func:`state_rows`).

* :func:`count_log` — rows, distinct cursors and their sum in the range (held against the WAL's
  own count and sum), and rows above it; :func:`duplicate_cursors` and :func:`log_gaps` sample a
  failure.
* :func:`state_differences` — the state rows the range touched against a replay of the range's
  log entries, written independently of :mod:`.state`'s fold (one row per written column, ranked
  by window; compared column by column): per column the newest ``(hlc, client_id)`` wins
  (client ids in UTF-16 order, the later cursor on an exact tie), a column not newer than the
  row's delete stamp is cleared, a row is live while a column survives. Over a partial range
  (``first > 1``) what predates it is unknown: a state stamp newer than every write of the range
  is accepted — it must come from before — but a write of the range must have survived, with its
  value, or lost to something newer. Over the whole log the state must equal the replay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..core.delta import DELETE
from ..core.schema import TableSchema
from .flush import lake_watermark
from .layout import (
    CURSOR_COL,
    DELETE_CLIENT_COL,
    DELETE_HLC_COL,
    LIVE_COL,
    WAL_FROM_PROP,
    WAL_TO_PROP,
    client_col,
    deltas_table,
    hlc_col,
    log_table,
    q,
    state_table,
    synced_columns,
    table_exists,
)
from .snapshots import ancestors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SAMPLE",
    "CursorRange",
    "LogCount",
    "StateDifferences",
    "count_log",
    "duplicate_cursors",
    "latest_flush_range",
    "log_gaps",
    "state_differences",
    "state_replay_sql",
    "state_rows",
    "whole_log_range",
]

SAMPLE: Final = 10
"""At most this many differing ids come back to the driver."""


@dataclass(frozen=True, slots=True)
class CursorRange:
    """WAL cursors ``first..last`` (inclusive; empty when ``first > last``)."""

    first: int
    last: int

    @property
    def empty(self) -> bool:
        """Whether the range holds no cursor."""
        return self.first > self.last

    @property
    def whole(self) -> bool:
        """Whether the range starts at the log's beginning (nothing predates it)."""
        return self.first <= 1

    def __str__(self) -> str:
        return f"{self.first}..{self.last}"


def latest_flush_range(spark: SparkSession, gw: str) -> CursorRange:
    """The WAL range of ``gw``'s latest flush commit (empty, at the watermark, when the lineage
    holds none)."""
    for snapshot in ancestors(spark, deltas_table(gw)) if _log_exists(spark, gw) else ():
        if WAL_FROM_PROP in snapshot.summary and WAL_TO_PROP in snapshot.summary:
            return CursorRange(snapshot.int_prop(WAL_FROM_PROP), snapshot.int_prop(WAL_TO_PROP))
    mark = lake_watermark(spark, gw).cursor
    return CursorRange(mark + 1, mark)


def whole_log_range(spark: SparkSession, gw: str) -> CursorRange:
    """Every cursor up to ``gw``'s lake watermark."""
    return CursorRange(1, lake_watermark(spark, gw).cursor)


def _log_exists(spark: SparkSession, gw: str) -> bool:
    return table_exists(spark, deltas_table(gw))


@dataclass(frozen=True, slots=True)
class LogCount:
    """The change log over a range: ``rows`` and ``distinct`` cursors in it, ``above`` (rows
    past its end), and the distinct cursors from ``wal_first`` on with their sum (what the WAL
    holds of the range is counted the same way)."""

    rows: int
    distinct: int
    above: int
    in_wal_range: int
    cursor_sum: int


def count_log(spark: SparkSession, gw: str, rng: CursorRange, wal_first: int) -> LogCount:
    """Count the change log over ``rng`` (one aggregate over cursors, files pruned by range)."""
    first, last = int(rng.first), int(rng.last)
    lo = int(wal_first)
    log = deltas_table(gw)
    row = spark.sql(
        f"SELECT coalesce(sum(CASE WHEN c <= {last} THEN n END), 0) AS rows, "
        f"count_if(c <= {last}) AS distinct_, "
        f"coalesce(sum(CASE WHEN c > {last} THEN n END), 0) AS above, "
        f"count_if(c BETWEEN {lo} AND {last}) AS wal_rows, "
        f"coalesce(sum(CASE WHEN c BETWEEN {lo} AND {last} THEN c END), 0) AS wal_sum "
        f"FROM (SELECT `cursor` AS c, count(*) AS n FROM {log} WHERE `cursor` >= {first} "
        "GROUP BY `cursor`)"
    ).collect()[0]
    return LogCount(
        int(row["rows"]),
        int(row["distinct_"]),
        int(row["above"]),
        int(row["wal_rows"]),
        int(row["wal_sum"]),
    )


def duplicate_cursors(spark: SparkSession, gw: str, rng: CursorRange) -> list[int]:
    """A sample of the cursors the change log holds more than once in ``rng``."""
    rows = spark.sql(
        f"SELECT `cursor` FROM {deltas_table(gw)} "
        f"WHERE `cursor` BETWEEN {int(rng.first)} AND {int(rng.last)} "
        f"GROUP BY `cursor` HAVING count(*) > 1 ORDER BY `cursor` LIMIT {SAMPLE}"
    ).collect()
    return [int(r["cursor"]) for r in rows]


def log_gaps(spark: SparkSession, gw: str, rng: CursorRange) -> list[CursorRange]:
    """A sample of the runs of cursors in ``rng`` the change log lacks (first ones first)."""
    first, last = int(rng.first), int(rng.last)
    rows = spark.sql(
        f"SELECT c + 1 AS gap_first, nxt - 1 AS gap_last FROM ("
        f"SELECT c, lead(c, 1, {last + 1}) OVER (ORDER BY c) AS nxt FROM ("
        f"SELECT DISTINCT `cursor` AS c FROM {deltas_table(gw)} "
        f"WHERE `cursor` BETWEEN {first} AND {last} UNION ALL SELECT {first - 1} AS c)) "
        f"WHERE nxt > c + 1 ORDER BY c LIMIT {SAMPLE}"
    ).collect()
    return [CursorRange(int(r["gap_first"]), int(r["gap_last"])) for r in rows]


@dataclass(frozen=True, slots=True)
class StateDifferences:
    """A state table against the replay of a range: state ``rows`` and log ``entries``
    compared, ``unmerged`` entries past the state's own watermark (not compared), how many
    rows ``differ`` and a ``sample`` of their ids, the state's last cursor in the range."""

    rows: int
    entries: int
    unmerged: int
    differ: int
    sample: list[str]
    state_cursor: int | None = None


def _lit(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _key(client: str) -> str:
    return f"encode({client}, 'UTF-16BE')"


def _newer(a: str, b: str) -> str:
    """SQL: stamp ``a`` newer than ``b`` (each a prefix naming ``<p>h`` and ``<p>k``; a null
    stamp is the oldest)."""
    return f"({a}h IS NOT NULL AND ({b}h IS NULL OR {a}h > {b}h OR ({a}h = {b}h AND {a}k > {b}k)))"


def _canonical(typ: str, value: str, *, stored: bool) -> str:
    """SQL: a cell as comparable text — a state column (``stored``) or a log value as
    ``get_json_object`` returns it (JSON strings unquoted, other JSON as compact text)."""
    if typ == "number":
        return f"CAST({value} AS STRING)" if stored else f"CAST(CAST({value} AS DOUBLE) AS STRING)"
    if typ == "boolean":
        return f"CAST({value} AS STRING)" if stored else value
    if typ == "json" and stored:  # a JSON null reads back as SQL NULL, as in the log
        return f"CASE WHEN trim({value}) <> 'null' THEN get_json_object({value}, '$') END"
    return value


def state_replay_sql(log: str, state: str, schema: TableSchema, rng: CursorRange) -> str:
    """Pure: the SQL whose rows are ``row_id, cur, entries, bad`` for each row the range
    touches — in the log relation ``log`` (change-log layout) or in the state relation ``state``
    (state layout): the state's cursor, the row's log entries compared, and whether it differs
    (see the module docstring). The range ends at the state's watermark: a row the range
    touches is a row with a log entry in it or a state cursor in it."""
    first, last = int(rng.first), int(rng.last)
    partial = "false" if rng.whole else "true"
    cols = synced_columns(schema)
    canon = " ".join(f"WHEN {_lit(n)} THEN {_canonical(t, 'v', stored=False)}" for n, t in cols)
    names = ", ".join(_lit(n) for n, _ in cols)
    cells = ", ".join(
        f"named_struct('col', {_lit(n)}, 'v', {_canonical(t, q(n), stored=True)}, "
        f"'h', {q(hlc_col(n))}, 'cl', {q(client_col(n))})"
        for n, t in cols
    )
    cur, live, dh, dc = q(CURSOR_COL), q(LIVE_COL), q(DELETE_HLC_COL), q(DELETE_CLIENT_COL)
    newer_w_d, newer_s_w, newer_s_d = _newer("w", "d"), _newer("s", "w"), _newer("s", "d")
    col_ok = (
        f"CASE WHEN {newer_w_d} THEN sh IS NOT NULL AND ((sh = wh AND sc = wc AND sv <=> wv) "
        f"OR ({partial} AND {newer_s_w})) ELSE sh IS NULL OR ({partial} AND {newer_s_d}) END"
    )
    delete_ok = (
        f"CASE WHEN t.x.xh IS NOT NULL THEN r.dh IS NOT NULL AND ((r.dh = t.x.xh AND "
        f"r.dc = t.x.xc) OR ({partial} AND {_newer('r.d', 't.x.x')})) "
        f"ELSE r.dh IS NULL OR {partial} END"
    )
    return f"""
WITH st AS (
  SELECT row_id, {cur} AS cur, {live} AS live, {dh} AS dh, {dc} AS dc, {_key(dc)} AS dk,
    array({cells}) AS cells
  FROM {state} WHERE {cur} BETWEEN {first} AND {last}
),
e AS (
  SELECT row_id, `cursor`, op, client_id, hlc, {_key("client_id")} AS k, `columns`
  FROM {log}
  WHERE `table` = {_lit(log_table(schema))} AND `cursor` BETWEEN {first} AND {last}
),
touched AS (
  SELECT row_id, max(`cursor`) AS cur, count(*) AS n,
    max_by(named_struct('xh', hlc, 'xc', client_id, 'xk', k), named_struct('h', hlc, 'k', k))
      FILTER (WHERE op = {_lit(DELETE)}) AS x
  FROM e GROUP BY row_id
),
writes AS (
  SELECT row_id, col,
    max_by(named_struct('wh', hlc, 'wc', client_id, 'wk', k, 'wv', CASE col {canon} END),
      named_struct('h', hlc, 'k', k, 'c', `cursor`)) AS w
  FROM (
    SELECT row_id, `cursor`, hlc, client_id, k,
      get_json_object(el, '$.column') AS col, get_json_object(el, '$.value') AS v
    FROM e LATERAL VIEW explode(from_json(`columns`, 'array<string>')) ex AS el
    WHERE op <> {_lit(DELETE)}
  ) WHERE col IN ({names})
  GROUP BY row_id, col
),
checked AS (
  SELECT row_id, bool_and({col_ok}) AS cells_ok, bool_or(sh IS NOT NULL) AS any_cell
  FROM (
    SELECT a.row_id, a.dh, a.dk, a.h AS sh, {_key("a.cl")} AS sk, a.cl AS sc, a.v AS sv,
      w.w.wh AS wh, w.w.wk AS wk, w.w.wc AS wc, w.w.wv AS wv
    FROM (SELECT st.row_id, st.dh, st.dk, c.* FROM st LATERAL VIEW inline(st.cells) c) a
    LEFT JOIN writes w ON w.row_id = a.row_id AND w.col = a.col
  ) GROUP BY row_id
)
SELECT coalesce(r.row_id, t.row_id) AS row_id, r.cur AS cur, t.n AS entries,
  (r.row_id IS NULL OR t.row_id IS NULL OR NOT (r.cur = t.cur AND ({delete_ok})
    AND (r.live <=> coalesce(k.any_cell, false)) AND coalesce(k.cells_ok, true))) AS bad
FROM st r
FULL OUTER JOIN touched t ON r.row_id = t.row_id
LEFT JOIN checked k ON k.row_id = r.row_id
"""


def state_differences(
    spark: SparkSession, gw: str, schema: TableSchema, rng: CursorRange
) -> StateDifferences:
    """Compare ``schema``'s state table with the replay of ``rng`` (counts and a sample)."""
    name, log = state_table(gw, log_table(schema)), deltas_table(gw)
    first, last = int(rng.first), int(rng.last)
    # First the state's last cursor in the range and the range's entries (one cheap, pruned
    # job): entries past that cursor are not merged yet, and a range without state rows needs
    # no replay.
    head = spark.sql(
        f"SELECT (SELECT max({q(CURSOR_COL)}) FROM {name} "
        f"WHERE {q(CURSOR_COL)} BETWEEN {first} AND {last}) AS top, "
        f"(SELECT count(*) FROM {log} WHERE `table` = {_lit(log_table(schema))} "
        f"AND `cursor` BETWEEN {first} AND {last}) AS n"
    ).collect()[0]
    in_range = int(head["n"])
    if head["top"] is None:
        return StateDifferences(0, 0, in_range, 0, [])
    top = int(head["top"])
    verdict = spark.sql(state_replay_sql(log, name, schema, CursorRange(first, top)))
    figures = verdict.selectExpr(
        "count(row_id) AS rows", "count_if(bad) AS differ", "coalesce(sum(entries), 0) AS n"
    ).collect()[0]
    differ = int(figures["differ"])
    sample: list[str] = []
    if differ:
        bad = verdict.filter("bad").select("row_id").orderBy("row_id").limit(SAMPLE).collect()
        sample = [str(r["row_id"]) for r in bad]
    entries = int(figures["n"])
    return StateDifferences(int(figures["rows"]), entries, in_range - entries, differ, sample, top)


def state_rows(
    spark: SparkSession, gw: str, schema: TableSchema, rng: CursorRange, batch: int
) -> Iterator[list[dict[str, Any]]]:
    """``schema``'s state rows whose ``_ls$cursor`` is in ``rng`` — ``row_id``, the synced
    columns and ``live`` — streamed to the driver partition by partition, ``batch`` at most at
    a time (the destination check looks each batch up in the destination)."""
    name = state_table(gw, log_table(schema))
    if not table_exists(spark, name):
        return
    cur = q(CURSOR_COL)
    frame = (
        spark.table(name)
        .filter(f"{cur} BETWEEN {int(rng.first)} AND {int(rng.last)}")
        .selectExpr("row_id", *(q(n) for n, _ in synced_columns(schema)), f"{q(LIVE_COL)} AS live")
    )
    chunk: list[dict[str, Any]] = []
    for row in frame.toLocalIterator():
        chunk.append(row.asDict())
        if len(chunk) >= batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
