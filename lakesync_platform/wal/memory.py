"""The WAL in memory: a real :class:`~lakesync_platform.core.wal.WalStore`, not a mock.

Same semantics as the SQL WAL (:mod:`.store`) — ids deduplicated forever, pushes planned and
committed whole or not at all, row states and entries stored in their encoded form and decoded
on read, watermarks that never move backwards, trimming bounded by the watermark, action keys
claimed once — without a database: for fast tests and for embedding the engine where
durability does not matter. One lock serialises every operation; a pull reads a snapshot of the
rows taken when it starts.
Nothing survives :meth:`MemoryWal.close`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..core.connectors import ConnectorConfig, connector_config_to_json, parse_connector_config
from ..core.errors import AdapterError, ValidationError
from ..core.merge import RowState, decode_row_state
from ..core.schema import TableSchema, evolve_schema, parse_table_schema, table_schema_to_json
from ..core.sync_rules import SyncRules, parse_sync_rules, sync_rules_to_json
from ..core.wal import (
    ActionClaim,
    AppendRequest,
    FlushRequest,
    GatewayCounters,
    GatewayStats,
    LoadedRows,
    PushCommit,
    PushPlanner,
    RowRecord,
    StoredRow,
    WalEntry,
    WalStorage,
    decode_columns,
)
from .memory_rows import (
    Deliveries,
    Held,
    MemoryFeedReader,
    MemoryRowReader,
    held_records,
    save_records,
)

__all__ = ["MemoryFeedReader", "MemoryRowReader", "MemoryWal"]

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


@dataclass
class _Row:
    table: str
    row_id: str
    state_json: str
    live: bool
    position: int


@dataclass
class _Gateway:
    """One gateway's log, rows and delivery state (what ``wal_gateways`` and its tables hold)."""

    created_ms: int
    last_cursor: int = 0
    appended_bytes: int = 0
    flush_watermark: int = 0
    flushed_bytes: int = 0
    entries: list[WalEntry] = field(default_factory=list)
    delta_ids: set[tuple[int, str]] = field(default_factory=set)
    rows: dict[str, _Row] = field(default_factory=dict)
    log_floor: int = 0
    ids_below_hlc: int = 0


@dataclass
class _Config:
    """One gateway's config store (schemas as ``(version, json)``, rules as JSON)."""

    schemas: dict[str, tuple[int, str]] = field(default_factory=dict)
    rules_json: str | None = None
    columns: dict[str, dict[str, int]] = field(default_factory=dict)
    connectors: dict[str, str] = field(default_factory=dict)
    connector_state: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class _ActionRow:
    """A claim or stored result of one action key (what ``wal_actions`` holds)."""

    owner: str
    result_json: str | None
    claimed_ms: int
    updated_ms: int


class MemoryWal:
    """Every gateway's log, row state, delivery state, config and flush requests, in memory."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._gateways: dict[str, _Gateway] = {}
        self._configs: dict[str, _Config] = {}
        self._deliveries: dict[str, Deliveries] = {}
        self._flush_requests: dict[str, FlushRequest] = {}
        self._actions: dict[tuple[str, str, str], _ActionRow] = {}
        self._closed = False

    def _open(self) -> None:
        if self._closed:
            raise AdapterError("The WAL is closed")

    # ------------------------------------------------------------------ the log

    def append_changes(
        self, gw: str, request: AppendRequest, planner: PushPlanner, now_ms: int
    ) -> PushCommit:
        """Claim, load, plan and write at once; nothing changes if ``planner`` raises."""
        with self._lock:
            self._open()
            g = self._gateways.get(gw) or _Gateway(created_ms=now_ms)
            fresh = {pair for pair in request.stamped_ids if pair not in g.delta_ids}
            states = {
                key: decode_row_state(row.state_json)
                for key in request.row_keys
                if (row := g.rows.get(key)) is not None
            }
            counters = GatewayCounters(g.last_cursor, g.appended_bytes, g.flushed_bytes)
            plan = planner(LoadedRows(counters, set(fresh), states))
            self._gateways[gw] = g
            g.delta_ids.update(fresh.difference(request.stamped_ids[i] for i in plan.refused))
            g.entries.extend(
                msgspec.structs.replace(e, columns=decode_columns(js))
                for e, js in zip(plan.entries, plan.entries_columns_json, strict=True)
            )
            for r in plan.rows:
                g.rows[r.row_key] = _Row(r.table, r.row_id, r.state_json, r.live, r.position)
            known = self._config(gw).columns
            for c in plan.new_columns:
                known.setdefault(c.table, {}).setdefault(c.column, c.ordinal)
            g.last_cursor = plan.last_cursor
            g.appended_bytes += plan.added_bytes
            client_id = request.client_id
            if client_id is None:
                return PushCommit(plan, 0)
            delivery = self._deliveries.setdefault(gw, Deliveries())
            held = delivery.client_rows.setdefault(client_id, {})
            for key in request.held_keys:
                held[key] = RowRecord(True, 0)
            return PushCommit(plan, delivery.last_since.get(client_id, 0))

    def read_entries(self, gw: str, after: int, limit: int = 10_000) -> list[WalEntry]:
        """Log entries with cursor > ``after``, ascending, at most ``limit``."""
        with self._lock:
            g = self._gateways.get(gw)
            if g is None:
                return []
            return [e for e in g.entries if e.cursor > after][:limit]

    def gateway_ids(self) -> list[str]:
        """Every gateway id that has ever accepted a push or stored a schema."""
        with self._lock:
            with_schemas = {
                gw for gw, cfg in self._configs.items() if cfg.schemas or cfg.connectors
            }
            return sorted(set(self._gateways) | with_schemas)

    def max_cursor(self, gw: str) -> int:
        """The last cursor handed out by ``gw`` (0 if none)."""
        with self._lock:
            g = self._gateways.get(gw)
            return 0 if g is None else g.last_cursor

    def flush_watermark(self, gw: str) -> int:
        """The cursor up to which the lake holds this gateway's log."""
        with self._lock:
            g = self._gateways.get(gw)
            return 0 if g is None else g.flush_watermark

    def set_flush_watermark(self, gw: str, cursor: int) -> None:
        """Record that the lake holds every entry up to ``cursor`` (never moves backwards)."""
        with self._lock:
            g = self._gateways.get(gw)
            if g is None or cursor <= g.flush_watermark:
                return
            g.flushed_bytes += sum(
                e.size for e in g.entries if g.flush_watermark < e.cursor <= cursor
            )
            g.flush_watermark = cursor

    def trim(self, gw: str, up_to: int, *, before_ms: int | None = None, batch: int = 2_000) -> int:
        """Delete entries in the lake with cursor ≤ ``up_to`` (with ``before_ms``: the oldest
        run ingested before it); move the floor; return how many."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        with self._lock:
            g = self._gateways.get(gw)
            if g is None:
                return 0
            bound = min(up_to, g.flush_watermark)
            cut = 0
            while cut < len(g.entries) and g.entries[cut].cursor <= bound:
                if before_ms is not None and g.entries[cut].ingest_ms >= before_ms:
                    break
                cut += 1
            if cut:
                g.log_floor = max(g.log_floor, g.entries[cut - 1].cursor)
                del g.entries[:cut]
            return cut

    def trim_delta_ids(self, gw: str, before_hlc: int, *, batch: int = 2_000) -> int:
        """Forget the ids of deltas stamped before ``before_hlc``; return how many."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        with self._lock:
            g = self._gateways.get(gw)
            if g is None:
                return 0
            old = {pair for pair in g.delta_ids if pair[0] < before_hlc}
            g.delta_ids -= old
            g.ids_below_hlc = max(g.ids_below_hlc, before_hlc)
            return len(old)

    def log_floor(self, gw: str) -> int:
        """The cursor up to which the log was trimmed (0: never)."""
        with self._lock:
            g = self._gateways.get(gw)
            return 0 if g is None else g.log_floor

    def dedup_horizon(self, gw: str) -> int:
        """The HLC before which accepted ids may have been forgotten (0: none were)."""
        with self._lock:
            g = self._gateways.get(gw)
            return 0 if g is None else g.ids_below_hlc

    def cursor_keeping(self, gw: str, entries: int) -> int:
        """The highest cursor that leaves the newest ``entries`` log entries above it."""
        if entries < 0:
            raise ValueError("entries must be >= 0")
        with self._lock:
            g = self._gateways.get(gw)
            if g is None or len(g.entries) <= entries:
                return 0
            return g.entries[len(g.entries) - entries - 1].cursor

    def storage(self) -> WalStorage:
        """Nothing on disk."""
        return WalStorage(0, None)

    def reclaim(self) -> None:
        """Nothing to reclaim: trimmed entries are gone with their list items."""

    def stats(self, gw: str) -> GatewayStats:
        """Counters for ``gw``: cursor, flush watermark, backlog and row counts."""
        with self._lock:
            g = self._gateways.get(gw)
            if g is None:
                return GatewayStats(gw, 0, 0, 0, 0, 0, 0)
            mark = g.flush_watermark
            return GatewayStats(
                gw,
                g.last_cursor,
                mark,
                sum(1 for e in g.entries if e.cursor > mark),
                g.appended_bytes - g.flushed_bytes,
                len(g.rows),
                sum(1 for r in g.rows.values() if r.live),
                len(g.entries),
                g.log_floor,
            )

    def oldest_unflushed_ms(self, gw: str) -> int | None:
        """Ingest time of the oldest entry not yet in the lake."""
        with self._lock:
            g = self._gateways.get(gw)
            if g is None:
                return None
            times = [e.ingest_ms for e in g.entries if e.cursor > g.flush_watermark]
            return min(times) if times else None

    # ------------------------------------------------------------------ rows and clients

    def last_pulled_since(self, gw: str, client_id: str) -> int:
        """The cursor ``client_id`` last pulled from (0 if it never pulled)."""
        with self._lock:
            delivery = self._deliveries.get(gw)
            return 0 if delivery is None else delivery.last_since.get(client_id, 0)

    def has_pulled(self, gw: str, client_id: str) -> bool:
        """Whether ``client_id`` ever pulled from ``gw`` (a pull from 0 included)."""
        with self._lock:
            delivery = self._deliveries.get(gw)
            return delivery is not None and client_id in delivery.last_since

    @contextmanager
    def pull_read(
        self, gw: str, client_id: str, since: int, now_ms: int, *, record: bool = True
    ) -> Iterator[MemoryRowReader]:
        """Remember that ``client_id`` pulled from ``since`` (unless not ``record``), then read
        a snapshot of the rows."""
        with self._lock:
            self._open()
            delivery = self._deliveries.setdefault(gw, Deliveries())
            if record:
                delivery.last_since[client_id] = since
            records = dict(delivery.client_rows.get(client_id, {}))
            rows = self._stored_rows(gw)
        yield MemoryRowReader(rows, records)

    @contextmanager
    def feed_read(self, gw: str) -> Iterator[MemoryFeedReader]:
        """A snapshot of the rows, and the clients' records, for the broadcast feed."""
        with self._lock:
            self._open()
            rows = self._stored_rows(gw)

        def records(client_ids: Sequence[str], keys: Sequence[str]) -> Held:
            with self._lock:
                return held_records(self._deliveries.get(gw), client_ids, keys)

        yield MemoryFeedReader(rows, records)

    def _stored_rows(self, gw: str) -> list[StoredRow]:
        g = self._gateways.get(gw)
        stored = {} if g is None else g.rows
        return [
            StoredRow(key, r.table, r.row_id, decode_row_state(r.state_json), r.position)
            for key, r in sorted(stored.items(), key=lambda kv: kv[1].position)
        ]

    def save_delivery_records(
        self,
        gw: str,
        records: Mapping[str, Mapping[str, RowRecord]],
        expected: Mapping[str, Mapping[str, RowRecord]] | None = None,
    ) -> None:
        """Upsert what each client holds of the rows named (one in ``expected`` only if its
        record is unchanged)."""
        with self._lock:
            self._open()
            save_records(self._deliveries.setdefault(gw, Deliveries()), records, expected or {})

    def save_client_records(
        self,
        gw: str,
        client_id: str,
        records: Mapping[str, RowRecord],
        expected: Mapping[str, RowRecord] | None = None,
    ) -> None:
        """Upsert what ``client_id`` holds of the rows ``records`` names (one in ``expected``
        only if its record is unchanged)."""
        self.save_delivery_records(gw, {client_id: records}, {client_id: expected or {}})

    def client_records(self, gw: str, client_id: str, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What ``client_id`` holds of the rows ``keys``, as far as the server knows."""
        with self._lock:
            self._open()
            delivery = self._deliveries.get(gw)
            held = {} if delivery is None else delivery.client_rows.get(client_id, {})
            return {k: rec for k in keys if (rec := held.get(k)) is not None}

    def row_states(self, gw: str, table: str) -> Iterator[tuple[str, RowState]]:
        """Every row of ``table`` as ``(row_id, state)`` (tombstones included)."""
        with self._lock:
            g = self._gateways.get(gw)
            rows = [] if g is None else [r for r in g.rows.values() if r.table == table]
            found = sorted((r.row_id, decode_row_state(r.state_json)) for r in rows)
        yield from found

    # ------------------------------------------------------------------ config store

    def _config(self, gw: str) -> _Config:
        return self._configs.setdefault(gw, _Config())

    def schemas(self, gw: str) -> dict[str, TableSchema]:
        """Registered table schemas of ``gw`` by table name."""
        with self._lock:
            stored = self._config(gw).schemas
            return {tbl: parse_table_schema(_json_decode(js)) for tbl, (_, js) in stored.items()}

    def schema_versions(self, gw: str) -> dict[str, int]:
        """Version of each registered schema (1 on first save, +1 per evolution)."""
        with self._lock:
            return {tbl: version for tbl, (version, _) in self._config(gw).schemas.items()}

    def save_schema(self, gw: str, schema: TableSchema, now_ms: int = 0) -> TableSchema:
        """Register or evolve (additively) ``schema``; return the stored schema."""
        with self._lock:
            self._open()
            stored = self._config(gw).schemas
            row = stored.get(schema.table)
            current = None if row is None else parse_table_schema(_json_decode(row[1]))
            evolved = evolve_schema(current, schema)
            if current is not None and evolved == current:
                return current
            body = _json_encode(table_schema_to_json(evolved)).decode()
            stored[schema.table] = (1 if row is None else row[0] + 1, body)
            return evolved

    def sync_rules(self, gw: str) -> SyncRules | None:
        """The gateway's sync rules, or ``None`` if none were saved."""
        with self._lock:
            body = self._config(gw).rules_json
        return None if body is None else parse_sync_rules(_json_decode(body))

    def save_sync_rules(self, gw: str, rules: SyncRules, now_ms: int = 0) -> None:
        """Replace the gateway's sync rules."""
        body = _json_encode(sync_rules_to_json(rules)).decode()
        with self._lock:
            self._open()
            self._config(gw).rules_json = body

    def table_columns(self, gw: str) -> dict[str, list[str]]:
        """Every column ever accepted, per table, in first-seen order."""
        with self._lock:
            known = self._config(gw).columns
            return {
                tbl: [col for _, col in sorted((o, c) for c, o in known[tbl].items())]
                for tbl in sorted(known)
            }

    # ------------------------------------------------------------------ action results

    def claim_action(
        self,
        gw: str,
        client_id: str,
        keys: Sequence[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
    ) -> ActionClaim:
        """Claim ``keys`` for ``owner``, or report the stored result or the running claim."""
        with self._lock:
            self._open()
            found = {k: row for k in keys if (row := self._actions.get((gw, client_id, k)))}
            for key in keys:
                row = found.get(key)
                if row is not None and row.result_json is not None:
                    return ActionClaim("stored", row.result_json)
            if any(row.claimed_ms > now_ms - lease_ms for row in found.values()):
                return ActionClaim("running")
            for key in keys:
                self._actions[(gw, client_id, key)] = _ActionRow(owner, None, now_ms, now_ms)
            return ActionClaim("claimed")

    def finish_action(
        self,
        gw: str,
        client_id: str,
        keys: Sequence[str],
        owner: str,
        result_json: str | None,
        now_ms: int,
    ) -> bool:
        """Store ``result_json`` under ``owner``'s claim of ``keys`` (``None``: release it)."""
        with self._lock:
            self._open()
            done = False
            for key in keys:
                row = self._actions.get((gw, client_id, key))
                if row is None or row.owner != owner or row.result_json is not None:
                    continue
                done = True
                if result_json is None:
                    del self._actions[(gw, client_id, key)]
                else:
                    row.result_json, row.updated_ms = result_json, now_ms
            return done

    def purge_actions(self, before_ms: int) -> int:
        """Forget results and claims last written before ``before_ms``."""
        with self._lock:
            old = [k for k, row in self._actions.items() if row.updated_ms < before_ms]
            for k in old:
                del self._actions[k]
            return len(old)

    # ------------------------------------------------------------------ connectors

    def connectors(self, gw: str) -> dict[str, ConnectorConfig]:
        """The connectors registered for ``gw`` by name."""
        with self._lock:
            stored = dict(self._config(gw).connectors)
        return {n: parse_connector_config(_json_decode(js)) for n, js in sorted(stored.items())}

    def save_connector(
        self, gw: str, cfg: ConnectorConfig, now_ms: int = 0, *, replace: bool = False
    ) -> None:
        """Register ``cfg`` (409 if the name exists, unless ``replace``)."""
        body = _json_encode(connector_config_to_json(cfg)).decode()
        with self._lock:
            self._open()
            stored = self._config(gw).connectors
            if cfg.name in stored and not replace:
                raise ValidationError(
                    f'Connector "{cfg.name}" is already registered', http_status=409
                )
            stored[cfg.name] = body

    def delete_connector(self, gw: str, name: str) -> bool:
        """Unregister ``name`` and drop its state."""
        with self._lock:
            self._open()
            config = self._config(gw)
            config.connector_state.pop(name, None)
            return config.connectors.pop(name, None) is not None

    def connector_state(self, gw: str, name: str) -> dict[str, dict[str, Any]]:
        """Each stream's saved state of connector ``name``."""
        with self._lock:
            saved = dict(self._config(gw).connector_state.get(name, {}))
        return {stream: _json_decode(js) for stream, js in saved.items()}

    def save_connector_state(
        self, gw: str, name: str, stream: str, state: dict[str, Any], now_ms: int = 0
    ) -> None:
        """Record ``stream``'s state."""
        body = _json_encode(state).decode()
        with self._lock:
            self._open()
            self._config(gw).connector_state.setdefault(name, {})[stream] = body

    # ------------------------------------------------------------------ flush requests

    def request_flush(self, gw: str, now_ms: int) -> FlushRequest:
        """Queue a flush of ``gw`` for the pipeline; return the request."""
        req = FlushRequest(uuid.uuid4().hex, gw, now_ms, "pending", None, now_ms)
        with self._lock:
            self._open()
            self._flush_requests[req.request_id] = req
        return req

    def flush_requests(
        self, gw: str | None = None, status: str | None = "pending", limit: int = 100
    ) -> list[FlushRequest]:
        """Flush requests, newest last, filtered by gateway and status."""
        with self._lock:
            found = [
                r
                for r in self._flush_requests.values()
                if (gw is None or r.gateway_id == gw) and (status is None or r.status == status)
            ]
        return sorted(found, key=lambda r: (r.requested_ms, r.request_id))[:limit]

    def recent_flush_requests(self, gw: str, limit: int) -> list[FlushRequest]:
        """The newest ``limit`` flush requests of ``gw`` whatever their status, newest last."""
        with self._lock:
            found = [r for r in self._flush_requests.values() if r.gateway_id == gw]
        ordered = sorted(found, key=lambda r: (r.requested_ms, r.request_id))
        return ordered[-limit:] if limit > 0 else []

    def update_flush_request(
        self, request_id: str, status: str, detail: str | None, now_ms: int
    ) -> None:
        """Record the progress or outcome of a flush request."""
        with self._lock:
            self._open()
            req = self._flush_requests.get(request_id)
            if req is not None:
                self._flush_requests[request_id] = FlushRequest(
                    request_id, req.gateway_id, req.requested_ms, status, detail, now_ms
                )

    # ------------------------------------------------------------------ lifecycle

    def ping(self) -> None:
        """Raise :class:`AdapterError` once the store is closed."""
        with self._lock:
            self._open()

    def close(self) -> None:
        """Drop everything; later writes raise :class:`AdapterError`."""
        with self._lock:
            self._closed = True
            self._gateways.clear()
            self._configs.clear()
            self._deliveries.clear()
            self._flush_requests.clear()
            self._actions.clear()
