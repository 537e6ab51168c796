"""Appending to the log: the push transaction on SQL (claim ids, load rows, write the plan).

:meth:`SqlAppend.append_changes` runs on the group committer's writer thread (one transaction
and one fsync for every push waiting at that moment, :mod:`.group_commit`): it locks the
gateway's row, claims the batch's ``(hlc, deltaId)`` pairs, loads the rows it touches, asks the
sync engine's planner what to write, and writes it with plain driver statements — the hot
path of every push, so no per-row SQLAlchemy work.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, select

from ..core.merge import RowState, decode_row_state
from ..core.wal import (
    AppendRequest,
    GatewayCounters,
    LoadedRows,
    PushCommit,
    PushPlan,
    PushPlanner,
    RowRecord,
)
from . import tables as t
from .database import chunks
from .group_commit import GroupCommitter
from .rows import SqlRows

__all__ = ["SqlAppend"]

_UPSERT_ROWS = (
    " ON CONFLICT (gateway_id, row_key) DO UPDATE SET state = excluded.state,"
    " live = excluded.live, position = excluded.position"
)


class SqlAppend(SqlRows):
    """The push transaction of the SQL WAL (row state and client records from :class:`SqlRows`)."""

    _committer: GroupCommitter
    _legacy_ids: dict[str, bool]

    def append_changes(
        self, gw: str, request: AppendRequest, planner: PushPlanner, now_ms: int
    ) -> PushCommit:
        """Claim, load, plan and write in one (group) transaction; see the module docstring."""
        return self._committer.run(
            gw, lambda conn: self._append_in(conn, gw, request, planner, now_ms)
        )

    def _append_in(
        self,
        conn: Connection,
        gw: str,
        request: AppendRequest,
        planner: PushPlanner,
        now_ms: int,
    ) -> PushCommit:
        counters = self._lock_gateway(conn, gw, now_ms)
        # Records every (hlc, deltaId) not accepted before (forever) and returns those: the
        # rest are duplicates. A delta repeated inside the batch is new only at its first
        # occurrence.
        fresh = self._claim_delta_ids(conn, gw, request.stamped_ids)
        states = self._load_rows(conn, gw, request.row_keys)
        plan = planner(LoadedRows(counters, fresh, states))
        if plan.refused:
            self._release_delta_ids(conn, gw, [request.stamped_ids[i] for i in plan.refused])
        self._write_plan(conn, gw, plan)
        client_id = request.client_id
        if client_id is None:
            return PushCommit(plan, 0)
        if request.held_keys:
            held = dict.fromkeys(request.held_keys, RowRecord(True, 0))
            self._save_client_records_in(conn, gw, client_id, held)
        return PushCommit(plan, self._last_since(conn, gw, client_id) or 0)

    def _lock_gateway(self, conn: Connection, gw: str, now_ms: int) -> GatewayCounters:
        """Create the gateway's row if new and lock it for the rest of the transaction."""
        g = t.gateways.c
        row = conn.execute(
            select(g.last_cursor, g.appended_bytes, g.flushed_bytes)
            .where(g.gateway_id == gw)
            .with_for_update()
        ).first()
        if row is None:
            conn.execute(
                self._insert(t.gateways)
                .values(
                    gateway_id=gw,
                    last_cursor=0,
                    appended_bytes=0,
                    flush_watermark=0,
                    flushed_bytes=0,
                    created_ms=now_ms,
                )
                .on_conflict_do_nothing()
            )
            row = conn.execute(
                select(g.last_cursor, g.appended_bytes, g.flushed_bytes)
                .where(g.gateway_id == gw)
                .with_for_update()
            ).one()
        return GatewayCounters(row[0], row[1], row[2])

    def _load_rows(self, conn: Connection, gw: str, keys: Sequence[str]) -> dict[str, RowState]:
        """Current row states for ``keys`` (absent keys are unknown rows)."""
        rows = self._select_in(
            conn,
            "SELECT row_key, state FROM wal_rows WHERE gateway_id = ? AND row_key {IN}",
            gw,
            keys,
        )
        return {key: decode_row_state(state) for key, state in rows}

    def _claim_delta_ids(
        self, conn: Connection, gw: str, stamped_ids: Sequence[tuple[int, str]]
    ) -> set[tuple[int, str]]:
        """Record ``(hlc, deltaId)`` pairs as accepted; return those not accepted before.

        One ``INSERT … ON CONFLICT DO NOTHING RETURNING`` (per 500 pairs on SQLite): the dedup
        lookup and the insert are one index descent per delta, at the end of the index (keys
        start with the HLC). Ids accepted before the HLC was part of the key (schema version
        1) are then looked up by id. The caller holds the gateway lock.
        """
        if not stamped_ids:
            return set()
        out: set[tuple[int, str]] = set()
        if self.dialect == "postgresql":
            hlcs, ids = zip(*stamped_ids, strict=True)
            rows = conn.exec_driver_sql(
                "INSERT INTO wal_delta_ids (gateway_id, hlc, delta_id)"
                " SELECT %s, * FROM unnest(%b::bigint[], %b::text[])"
                " ON CONFLICT DO NOTHING RETURNING hlc, delta_id",
                (gw, list(hlcs), list(ids)),
            ).all()
            out.update((r[0], r[1]) for r in rows)
        else:
            for part in chunks(stamped_ids):
                stmt = (
                    "INSERT INTO wal_delta_ids (gateway_id, hlc, delta_id) VALUES "
                    + ",".join(["(?1,?,?)"] * len(part))
                    + " ON CONFLICT DO NOTHING RETURNING hlc, delta_id"
                )
                params = [v for pair in part for v in pair]
                out.update((r[0], r[1]) for r in conn.exec_driver_sql(stmt, (gw, *params)).all())
        if out and self._has_legacy_ids(conn, gw):
            legacy = {
                r[0]
                for r in self._select_in(
                    conn,
                    "SELECT delta_id FROM wal_delta_ids WHERE gateway_id = ?"
                    f" AND hlc = {t.LEGACY_HLC} AND delta_id {{IN}}",
                    gw,
                    sorted({i for _, i in out}),
                )
            }
            out = {pair for pair in out if pair[1] not in legacy}
        return out

    def _release_delta_ids(
        self, conn: Connection, gw: str, stamped_ids: Sequence[tuple[int, str]]
    ) -> None:
        """Forget claimed pairs of deltas the plan refused (they were claimed in this
        transaction, so nothing else has seen them)."""
        conn.exec_driver_sql(
            self._sql(
                "DELETE FROM wal_delta_ids WHERE gateway_id = ? AND hlc = ? AND delta_id = ?"
            ),
            [(gw, hlc, delta_id) for hlc, delta_id in stamped_ids],
        )

    def _has_legacy_ids(self, conn: Connection, gw: str) -> bool:
        """Whether ``gw`` has ids from before schema version 2 (none are added since)."""
        known = self._legacy_ids.get(gw)
        if known is None:
            known = self._legacy_ids[gw] = (
                conn.exec_driver_sql(
                    self._sql(
                        "SELECT 1 FROM wal_delta_ids WHERE gateway_id = ?"
                        f" AND hlc = {t.LEGACY_HLC} LIMIT 1"
                    ),
                    (gw,),
                ).first()
                is not None
            )
        return known

    def _write_plan(self, conn: Connection, gw: str, plan: PushPlan) -> None:
        """Write one push's plan; the caller holds the gateway lock and commits."""
        entries, rows = plan.entries, plan.rows
        if self.dialect == "postgresql":
            self._write_plan_postgres(conn, gw, plan)
        else:
            if entries:
                conn.exec_driver_sql(
                    "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op,"
                    " client_id, hlc, columns, ingest_ms, size) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            gw, e.cursor, e.delta_id, e.table, e.row_id, e.op, e.client_id,
                            e.hlc, columns_json, e.ingest_ms, e.size,
                        )
                        for e, columns_json in zip(entries, plan.entries_columns_json, strict=True)
                    ],
                )  # fmt: skip
            if rows:
                conn.exec_driver_sql(
                    "INSERT INTO wal_rows (gateway_id, row_key, tbl, row_id, state, live, position)"
                    " VALUES (?,?,?,?,?,?,?)" + _UPSERT_ROWS,
                    [
                        (gw, r.row_key, r.table, r.row_id, r.state_json, int(r.live), r.position)
                        for r in rows
                    ],
                )
        if plan.new_columns:
            conn.execute(
                self._insert(t.table_columns).on_conflict_do_nothing(),
                [
                    {"gateway_id": gw, "tbl": c.table, "col": c.column, "ordinal": c.ordinal}
                    for c in plan.new_columns
                ],
            )
        conn.exec_driver_sql(
            self._sql(
                "UPDATE wal_gateways SET last_cursor = ?, appended_bytes = appended_bytes + ?"
                " WHERE gateway_id = ?"
            ),
            (plan.last_cursor, plan.added_bytes, gw),
        )

    @staticmethod
    def _write_plan_postgres(conn: Connection, gw: str, plan: PushPlan) -> None:
        """One statement per table: columns as binary arrays, expanded server-side by ``unnest``."""
        entries, rows = plan.entries, plan.rows
        if entries:
            conn.exec_driver_sql(
                "INSERT INTO wal_entries (gateway_id, cursor, delta_id, tbl, row_id, op, client_id,"
                " hlc, columns, ingest_ms, size) SELECT %s, * FROM unnest(%b::bigint[],"
                " %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[],"
                " %b::text[], %b::bigint[], %b::int[])",
                (
                    gw,
                    [e.cursor for e in entries],
                    [e.delta_id for e in entries],
                    [e.table for e in entries],
                    [e.row_id for e in entries],
                    [e.op for e in entries],
                    [e.client_id for e in entries],
                    [e.hlc for e in entries],
                    plan.entries_columns_json,
                    [e.ingest_ms for e in entries],
                    [e.size for e in entries],
                ),
            )
        if rows:
            conn.exec_driver_sql(
                "INSERT INTO wal_rows (gateway_id, row_key, tbl, row_id, state, live, position)"
                " SELECT %s, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::int[], %b::bigint[])" + _UPSERT_ROWS,
                (
                    gw,
                    [r.row_key for r in rows],
                    [r.table for r in rows],
                    [r.row_id for r in rows],
                    [r.state_json for r in rows],
                    [int(r.live) for r in rows],
                    [r.position for r in rows],
                ),
            )
