"""Push and pull: the sync logic between the protocol and the WAL.

Push (ARCHITECTURE.md §3): validate every delta (schema, drift) before writing anything; then,
in one transaction under the gateway's lock, drop already-accepted ``deltaId``s (forever),
merge each delta into row state by per-column LWW, append the *effective* change with the next
ingest cursor, and commit. A row where the pusher's write lost (wholly or in part), or that it
pushed again, is re-announced at a fresh cursor so the pusher re-reads the winning state.

Pull (ARCHITECTURE.md §4): pages are cut from **row state** in cursor order — every row whose
last change is after ``since`` appears once, whole, as it is now. That is what makes any
cursor safe: a client that re-pulls an old cursor, ignores ``hasMore``, or restarts from 0
receives current rows, never a stale value. Sync rules are evaluated on the row as it is now,
with the caller's claims.

Encoding for clients without per-column stamps (the TypeScript client, PROTOCOL.md §12): a live
row in the view is sent as two deltas — ``DELETE`` stamped ``0`` followed by a full-row
``INSERT`` stamped with the row's newest stamp. The ``0``-stamped delete loses to any pending
local change and otherwise clears the row, so the ``INSERT`` never hits an existing row; when a
pending local change loses to the row, the TS applier turns the ``INSERT`` into an ``UPDATE``
(pending ``UPDATE``) or applies it (pending ``DELETE``, none), and the row ends equal to the
server's. A row deleted or out of the view is one ``DELETE`` stamped with its newest stamp —
sent only to clients that may hold it (tracked per client when sync rules filter the table).
Clients that keep per-column stamps ask for ``stamped`` pages: one delta per row with every
column's stamp (see docs/protocol.md).

The push response's ``serverHlc`` is the cursor the client last pulled from: the TS client
sets its cursor to it, and it must never jump past entries the client has not received.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlalchemy import Connection

from ..core.delta import DELETE, INSERT, RowDelta
from ..core.errors import BackpressureError, ClockDriftError, ForbiddenError
from ..core.hlc import MAX_DRIFT_MS, decode
from ..core.merge import RowState, encode_row_state, merge_delta
from ..core.schema import TableSchema, check_delta
from ..core.sync_rules import Claims, ClientView, SyncRules, sync_rules_to_json
from .group_commit import GroupCommitter
from .model import (
    PulledColumn,
    PulledDelta,
    PullPage,
    PushResult,
    StampedColumn,
    StampedInsert,
    WalEntry,
)
from .store import RowRecord, StoredRow, WriteAheadLog, encode_columns

__all__ = ["POSITION_BITS", "SyncService", "compose_cursor", "split_cursor"]

POSITION_BITS = 40
"""Low bits of a pull cursor hold the ingest position; the bits above hold the view tag."""
_POSITION_MASK = (1 << POSITION_BITS) - 1
_TAG_BITS = 22
_SCAN_CHUNK = 2000
_CONFIG_TTL_S = 1.0
_json_encode = msgspec.json.Encoder().encode


def compose_cursor(tag: int, position: int) -> int:
    """A pull cursor: the view tag (0 without filtering rules) above the ingest position."""
    return (tag << POSITION_BITS) | position


def split_cursor(cursor: int) -> tuple[int, int]:
    """Inverse of :func:`compose_cursor`."""
    return cursor >> POSITION_BITS, cursor & _POSITION_MASK


def _estimate_bytes(d: RowDelta) -> int:
    """The reference's delta size estimate (PROTOCOL.md §10.1), for backlog accounting."""
    size = 33 + len(d.delta_id) + 2 * (len(d.table) + len(d.row_id) + len(d.client_id))
    for col in d.columns:
        v = col.value
        if v is None or isinstance(v, bool):
            vb = 4
        elif isinstance(v, int | float):
            vb = 8
        elif isinstance(v, str):
            vb = 2 * len(v)
        else:
            vb = len(msgspec.json.encode(v))
        size += 2 * len(col.column) + vb
    return size


@dataclass
class _GatewayConfig:
    """A gateway's schemas, rules and known columns, cached for ``_CONFIG_TTL_S``."""

    schemas: dict[str, TableSchema]
    versions: dict[str, int]
    rules: SyncRules | None
    rules_key: bytes
    columns: dict[str, list[str]]
    loaded: float
    has_filters: bool = field(init=False)
    column_sets: dict[str, set[str]] = field(init=False)
    _types: dict[str, dict[str, str]] = field(init=False)
    _delivered: dict[tuple[str, int], tuple[tuple[str, ...], frozenset[str]]] = field(init=False)

    def __post_init__(self) -> None:
        self.has_filters = self.rules is not None and any(b.filters for b in self.rules.buckets)
        self.column_sets = {tbl: set(cols) for tbl, cols in self.columns.items()}
        self._types = {}
        self._delivered = {}

    def add_column(self, table: str, name: str) -> None:
        """Record a column first accepted by a push (``columns`` keeps first-seen order)."""
        if name not in self.column_sets.setdefault(table, set()):
            self.column_sets[table].add(name)
            self.columns.setdefault(table, []).append(name)

    def column_types(self, table: str) -> dict[str, str]:
        """Declared type by column name for a table with a registered schema."""
        types = self._types.get(table)
        if types is None:
            types = self._types[table] = {c.name: c.type for c in self.schemas[table].columns}
        return types

    def delivered_columns(self, table: str) -> tuple[tuple[str, ...], frozenset[str]]:
        """:meth:`full_columns` as a tuple and a set, cached until the config reloads."""
        key = (table, len(self.columns.get(table, ())))
        cached = self._delivered.get(key)
        if cached is None:
            names = tuple(self.full_columns(table))
            cached = self._delivered[key] = (names, frozenset(names))
        return cached

    def full_columns(self, table: str) -> list[str]:
        """Every column a delivered row of ``table`` carries (``null`` where the row has none)."""
        schema = self.schemas.get(table)
        if schema is not None:
            return list(schema.column_names)
        return self.columns.get(table, [])

    def view_tag(self, claims: Claims) -> int:
        """0 without filtering rules; else a hash of the rules and the caller's claims."""
        if not self.has_filters:
            return 0
        h = hashlib.sha256(self.rules_key)
        for k in sorted(claims):
            v = claims[k]
            h.update(b"\0" + k.encode() + b"\1")
            h.update("\2".join([v] if isinstance(v, str) else list(v)).encode())
        return (int.from_bytes(h.digest()[:4], "big") & ((1 << _TAG_BITS) - 1)) | 1


@dataclass(slots=True)
class _Prepared:
    """Per-delta work done before a push queues for the writer (parallel lists, by index).

    ``new_row_json[i]`` is the stored state of the row delta ``i`` creates if its row does not
    exist yet (``None`` for a DELETE or a write without columns, which never create one).
    ``may_add_columns[i]`` is false when every column of delta ``i`` was already known.
    """

    keys: list[str]
    sizes: list[int]
    columns_json: list[str]
    new_row_json: list[str | None]
    may_add_columns: list[bool]


def _prepare(
    cfg: _GatewayConfig,
    client_id: str,
    deltas: Sequence[RowDelta],
    now: int,
    *,
    any_client_ids: bool,
) -> _Prepared:
    """Validate ``deltas`` (ownership, schema, clock drift) and precompute what the writer needs.

    Raises on the first invalid delta; nothing has been written then.
    """
    prep = _Prepared([], [], [], [], [])
    max_hlc = (now + MAX_DRIFT_MS + 1) << 16  # an HLC at or past this is too far ahead
    known = cfg.column_sets
    for d in deltas:
        if not any_client_ids and d.client_id != client_id:
            raise ForbiddenError(f'Delta clientId "{d.client_id}" does not match the push clientId')
        cols = d.columns
        schema = cfg.schemas.get(d.table)
        if schema is not None and d.op != DELETE:
            types = cfg.column_types(d.table)
            for col in cols:
                if not _fits(types.get(col.column), col.value):
                    # the full check: raises, or accepts the whole delta (e.g. json columns)
                    check_delta(schema, d, version=cfg.versions.get(d.table, 1))
                    break
        if d.hlc >= max_hlc:
            drift = decode(d.hlc)[0] - now
            raise ClockDriftError(f"Remote clock is {drift}ms ahead (max drift: {MAX_DRIFT_MS}ms)")
        prep.keys.append(f"{d.table}:{d.row_id}")
        prep.sizes.append(_estimate_bytes(d))
        prep.columns_json.append(_json_encode(cols).decode())
        if d.op == DELETE or not cols:
            prep.new_row_json.append(None)
            prep.may_add_columns.append(False)
            continue
        hlc, cid = d.hlc, d.client_id
        row = {c.column: (c.value, hlc, cid) for c in cols}
        # the RowState encoding (core.merge) of a row that holds exactly this write
        prep.new_row_json.append(
            _json_encode({"c": row, "dh": 0, "dc": ""}).decode() if len(row) == len(cols) else None
        )
        table_known = known.get(d.table)
        prep.may_add_columns.append(
            table_known is None or any(c.column not in table_known for c in cols)
        )
    return prep


def _fits(col_type: str | None, value: Any) -> bool:
    """The common cases of :func:`~lakesync_platform.core.schema.check_delta`, inline; ``False``
    means "not sure" (the caller then runs the full check, which raises or accepts)."""
    if value is None:
        return col_type is not None
    kind = type(value)
    if col_type == "string":
        return kind is str
    if col_type == "number":
        return kind is int or (kind is float and math.isfinite(value))
    if col_type == "boolean":
        return kind is bool
    return False


def _delivery_id(kind: str, key: str, position: int) -> str:
    """The delivery id of one version (``position``) of a row, for one kind of delivery.

    The SHA-256 of ``kind``, the row key, NUL and the position, as hex (one string built and
    encoded per id: pulls compute one or two per row).
    """
    return hashlib.sha256(f"{kind}{key}\0{position}".encode()).hexdigest()


class SyncService:
    """Push and pull against a :class:`WriteAheadLog`; one instance serves every gateway id."""

    def __init__(
        self,
        wal: WriteAheadLog,
        clock: Callable[[], int],
        *,
        max_backlog_bytes: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wal = wal
        self._clock = clock
        self._monotonic = monotonic
        self.max_backlog_bytes = max_backlog_bytes
        self._configs: dict[str, _GatewayConfig] = {}
        self._committer = GroupCommitter(wal)

    def close(self) -> None:
        """Finish queued pushes and stop the writer thread (the WAL stays open)."""
        self._committer.close()

    # ------------------------------------------------------------------ config

    def config(self, gw: str, *, fresh: bool = False) -> _GatewayConfig:
        """The gateway's config (schemas, rules, known columns), reloaded every second."""
        cached = self._configs.get(gw)
        if cached is not None and not fresh and self._monotonic() - cached.loaded < _CONFIG_TTL_S:
            return cached
        rules = self.wal.sync_rules(gw)
        cfg = _GatewayConfig(
            schemas=self.wal.schemas(gw),
            versions=self.wal.schema_versions(gw),
            rules=rules,
            rules_key=b"" if rules is None else msgspec.json.encode(sync_rules_to_json(rules)),
            columns=self.wal.table_columns(gw),
            loaded=self._monotonic(),
        )
        self._configs[gw] = cfg
        return cfg

    def save_schema(self, gw: str, schema: TableSchema) -> TableSchema:
        """Register or evolve a table schema (additive only)."""
        stored = self.wal.save_schema(gw, schema, self._clock())
        self.config(gw, fresh=True)
        return stored

    def save_sync_rules(self, gw: str, rules: SyncRules) -> None:
        """Replace the gateway's sync rules; clients re-sync their view on their next pull."""
        self.wal.save_sync_rules(gw, rules, self._clock())
        self.config(gw, fresh=True)

    # ------------------------------------------------------------------ push

    def push(
        self,
        gw: str,
        client_id: str,
        deltas: Sequence[RowDelta],
        *,
        claims: Claims | None = None,
        any_client_ids: bool = False,
    ) -> PushResult:
        """Accept a batch whole or reject it whole; see the module docstring.

        Everything that does not depend on stored state (validation, row keys, size estimates,
        the JSON of each delta's columns and of the row it creates if the row is new) is done
        here, on the caller's thread; the WAL writer thread, which every push of the process
        queues for, only looks up, merges and writes.
        """
        now = self._clock()
        cfg = self.config(gw)
        prep = _prepare(cfg, client_id, deltas, now, any_client_ids=any_client_ids)
        view = ClientView(cfg.rules, claims or {}) if cfg.has_filters else None

        def apply(conn: Connection) -> tuple[PushResult, list[tuple[str, str, int]]]:
            lock = self.wal.lock_gateway(conn, gw, now)
            if (
                self.max_backlog_bytes is not None
                and lock.appended_bytes - lock.flushed_bytes >= self.max_backlog_bytes
            ):
                backlog = lock.appended_bytes - lock.flushed_bytes
                raise BackpressureError(
                    f"WAL backlog exceeded ({backlog} >= {self.max_backlog_bytes} bytes); "
                    "retry after the next flush"
                )
            # Records every (hlc, deltaId) not accepted before (forever) and returns those: the
            # rest are duplicates. A delta repeated inside the batch is new only at its first
            # occurrence.
            fresh_ids = self.wal.claim_delta_ids(conn, gw, [(d.hlc, d.delta_id) for d in deltas])
            keys = prep.keys
            states: dict[str, RowState] = self.wal.load_rows(conn, gw, list(dict.fromkeys(keys)))
            cursor = lock.last_cursor
            entries: list[WalEntry] = []
            entry_rows: list[tuple[Any, ...]] = []
            positions: dict[str, int] = {}
            rows_of: dict[str, RowDelta] = {}
            # rows this push created whose state is still exactly one delta's (its index)
            created: dict[str, int] = {}
            bump: dict[str, None] = {}
            new_columns: list[tuple[str, str, int]] = []
            known: dict[str, set[str]] | None = None
            duplicates = 0
            added_bytes = 0
            for i, d in enumerate(deltas):
                key = keys[i]
                stamped_id = (d.hlc, d.delta_id)
                if stamped_id not in fresh_ids:
                    duplicates += 1
                    if key in states or key in created:
                        bump[key] = None
                        rows_of.setdefault(key, d)
                    continue
                fresh_ids.discard(stamped_id)
                rows_of[key] = d
                size = prep.sizes[i]
                if prep.new_row_json[i] is not None and key not in states and key not in created:
                    # A write to a row nobody has: every column wins, the row is born with it.
                    cursor += 1
                    added_bytes += size
                    entries.append(
                        WalEntry(
                            cursor, d.delta_id, d.table, d.row_id, INSERT, d.client_id,
                            d.hlc, d.columns, now, size,
                        )
                    )  # fmt: skip
                    entry_rows.append(
                        (
                            cursor, d.delta_id, d.table, d.row_id, INSERT, d.client_id,
                            d.hlc, prep.columns_json[i], now, size,
                        )
                    )  # fmt: skip
                    positions[key] = cursor
                    created[key] = i
                else:
                    if key in created:
                        states[key] = merge_delta(None, deltas[created.pop(key)]).state
                    outcome = merge_delta(states.get(key), d)
                    states[key] = outcome.state
                    if outcome.op is not None:
                        cursor += 1
                        added_bytes += size
                        entries.append(
                            WalEntry(
                                cursor, d.delta_id, d.table, d.row_id, outcome.op,
                                d.client_id, d.hlc, outcome.columns, now, size,
                            )
                        )  # fmt: skip
                        columns_json = (
                            prep.columns_json[i]
                            if outcome.columns == d.columns
                            else encode_columns(outcome.columns)
                        )
                        entry_rows.append(
                            (
                                cursor, d.delta_id, d.table, d.row_id, outcome.op,
                                d.client_id, d.hlc, columns_json, now, size,
                            )
                        )  # fmt: skip
                        positions[key] = cursor
                    if outcome.op is None or (
                        d.op != DELETE and len(outcome.columns) < len({c.column for c in d.columns})
                    ):
                        bump[key] = None
                if prep.may_add_columns[i]:
                    if known is None:
                        known = {tbl: set(cols) for tbl, cols in list(cfg.columns.items())}
                    table_known = known.setdefault(d.table, set())
                    for col in d.columns:
                        if col.column not in table_known:
                            table_known.add(col.column)
                            new_columns.append((d.table, col.column, len(table_known)))
            for key in bump:
                cursor += 1
                positions[key] = cursor
            state_rows: list[tuple[Any, ...]] = []
            for key, pos in positions.items():
                d = rows_of[key]
                if key in created:
                    state_rows.append(
                        (key, d.table, d.row_id, prep.new_row_json[created[key]], 1, pos)
                    )
                else:
                    st = states[key]
                    state_json = encode_row_state(st).decode()
                    state_rows.append((key, d.table, d.row_id, state_json, int(st.live), pos))
            self.wal.write_push(
                conn,
                gw,
                entry_rows=entry_rows,
                state_rows=state_rows,
                last_cursor=cursor,
                added_bytes=added_bytes,
                new_columns=new_columns,
            )
            if view is not None:
                # A client that wrote a row may hold it from now on. A pushed DELETE proves
                # nothing (deliveries may have re-created the row locally since): never
                # narrow what a client may hold on push, only on confirmed deliveries.
                marks = {
                    d.key: RowRecord(True, 0)
                    for d in deltas
                    if d.op != DELETE and not view.table_unfiltered(d.table)
                }
                self.wal.save_client_records(conn, gw, client_id, marks)
            last_since = self.wal.last_since(conn, gw, client_id)
            result = PushResult(len(deltas), duplicates, tuple(entries), last_since or 0)
            return result, new_columns

        result, new_columns = self._committer.run(gw, apply)
        for tbl, name, _ordinal in new_columns:
            cfg.add_column(tbl, name)
        return result

    # ------------------------------------------------------------------ pull

    def pull(
        self,
        gw: str,
        client_id: str,
        since: int,
        limit: int,
        *,
        claims: Claims | None = None,
        stamped: bool = False,
    ) -> PullPage:
        """One page of rows changed after cursor ``since``, as this client may see them."""
        claims = claims or {}
        cfg = self.config(gw)
        view = ClientView(cfg.rules, claims)
        tag = cfg.view_tag(claims)
        since_tag, since_pos = split_cursor(max(since, 0))
        resync = since_tag != tag
        start = 0 if resync else since_pos

        out: list[PulledDelta | StampedInsert] = []
        pending_marks: list[tuple[str, bool]] = []
        last_pos = start
        has_more = False
        per_row = 1 if stamped else 2
        # Unfiltered views need exactly the rows of one page (plus one to see if more exist);
        # filtered views read ahead, since many rows may be invisible.
        chunk_size = (limit // per_row + 1) if not cfg.has_filters else _SCAN_CHUNK
        unfiltered: dict[str, bool] = {}  # per table: every row visible
        hidden: set[str] = set()  # tables no bucket of the view can show
        with self.wal.pull_read(gw, client_id, max(since, 0), self._clock()) as conn:
            after = start
            while True:
                chunk = self.wal.scan_rows(conn, gw, after, chunk_size)
                if not chunk:
                    break
                tracked = (
                    [r.row_key for r in chunk if not view.table_unfiltered(r.table)]
                    if cfg.has_filters
                    else []
                )
                records = self.wal.client_records(conn, gw, client_id, tracked) if tracked else {}
                for row in chunk:
                    table = row.table
                    if table not in unfiltered:
                        unfiltered[table] = view.table_unfiltered(table)
                        if not unfiltered[table] and not view.table_visible(table):
                            hidden.add(table)
                    if table in hidden:
                        last_pos = row.position
                        continue
                    live = bool(row.state.columns)
                    filtered = not unfiltered[table]
                    if filtered:
                        visible = live and view.row_visible(table, row.state.values())
                    else:
                        visible = live
                    if not visible and filtered:
                        rec = records.get(row.row_key)
                        may_hold = rec is not None and (rec.held or rec.at_cursor > since_pos)
                        if not may_hold:
                            last_pos = row.position
                            continue
                    need = per_row if visible else 1
                    if out and len(out) + need > limit:
                        has_more = True
                        break
                    out.extend(self._encode_row(cfg, row, visible, stamped))
                    if filtered:
                        pending_marks.append((row.row_key, visible))
                    last_pos = row.position
                if has_more or len(chunk) < chunk_size:
                    break
                after = chunk[-1].position
        server_cursor = compose_cursor(tag, last_pos)
        if pending_marks:
            marks = {key: RowRecord(held, last_pos) for key, held in pending_marks}
            with self.wal.write() as conn:
                self.wal.save_client_records(conn, gw, client_id, marks)
        return PullPage(out, server_cursor, has_more)

    def _encode_row(
        self, cfg: _GatewayConfig, row: StoredRow, visible: bool, stamped: bool
    ) -> list[PulledDelta | StampedInsert]:
        state = row.state
        hlc, client = state.newest_stamp()
        if not visible:
            delta_id = _delivery_id("D", row.row_key, row.position)
            return [PulledDelta(DELETE, row.table, row.row_id, client, [], str(hlc), delta_id)]
        names, name_set = cfg.delivered_columns(row.table)
        cols = state.columns
        if stamped:
            columns = [
                StampedColumn(n, c.value, str(c.hlc), c.client_id)
                for n in names
                if (c := cols.get(n)) is not None
            ]
            if len(columns) < len(cols):  # columns outside the table's known ones, after them
                columns.extend(
                    StampedColumn(n, c.value, str(c.hlc), c.client_id)
                    for n, c in cols.items()
                    if n not in name_set
                )
            return [
                StampedInsert(
                    INSERT,
                    row.table,
                    row.row_id,
                    client,
                    columns,
                    str(hlc),
                    _delivery_id("S", row.row_key, row.position),
                    str(state.delete_hlc),
                    state.delete_client,
                )
            ]
        extra = [n for n in cols if n not in name_set]
        full = [
            PulledColumn(n, c.value if (c := cols.get(n)) is not None else None)
            for n in (*names, *extra)
        ]
        clear_id = _delivery_id("C", row.row_key, row.position)
        insert_id = _delivery_id("I", row.row_key, row.position)
        return [
            PulledDelta(DELETE, row.table, row.row_id, client, [], "0", clear_id),
            PulledDelta(INSERT, row.table, row.row_id, client, full, str(hlc), insert_id),
        ]

    def known_rows(self, gw: str, table: str) -> Mapping[str, RowState]:
        """The gateway's current row state of ``table`` (tests, checks, admin)."""
        return dict(self.wal.row_states(gw, table))
