"""The write-ahead log as a port: the records it keeps and hands out, and :class:`WalStore`.

The sync engine (:mod:`lakesync_platform.sync`), the gateway, the pipeline and the sensors talk
to the log through :class:`WalStore`; :mod:`lakesync_platform.wal` implements it (SQLite and
PostgreSQL on SQLAlchemy Core, and an in-memory twin for fast tests). Nothing here does I/O.

A push is planned, then committed (ARCHITECTURE.md §3): :meth:`WalStore.append_changes` locks
the gateway, claims the batch's ``(hlc, deltaId)`` pairs and loads the rows it touches
(:class:`LoadedRows`), hands them to a pure planner that returns a :class:`PushPlan` (what to
append, which row states change, which columns are new), and writes the plan in the same
transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from .connectors import ConnectorConfig
from .delta import ColumnDelta, RowDelta
from .merge import RowState
from .schema import TableSchema
from .sync_rules import SyncRules

__all__ = [
    "ActionClaim",
    "AppendRequest",
    "ConnectorStore",
    "FeedReader",
    "FlushRequest",
    "GatewayCounters",
    "GatewayStats",
    "LoadedRows",
    "NewColumn",
    "PushCommit",
    "PushPlan",
    "PushPlanner",
    "RowReader",
    "RowRecord",
    "RowWrite",
    "StoredRow",
    "WalEntry",
    "WalStorage",
    "WalStore",
    "decode_columns",
    "encode_columns",
]

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


class WalEntry(msgspec.Struct, frozen=True):
    """One accepted change, as appended to the log (a struct: built in C on the push path).

    ``cursor`` is the server-assigned, strictly increasing ingest cursor (per gateway).
    ``columns`` are the *effective* columns (the ones the delta won); ``op`` is ``INSERT`` (the
    row became live), ``UPDATE`` or ``DELETE``. ``hlc``/``client_id``/``delta_id`` are the
    writer's. ``ingest_ms`` is the server's wall clock at commit.
    """

    cursor: int
    delta_id: str
    table: str
    row_id: str
    op: str
    client_id: str
    hlc: int
    columns: tuple[ColumnDelta, ...]
    ingest_ms: int
    size: int

    def to_delta(self) -> RowDelta:
        """The entry as a row delta (its effective columns only)."""
        return RowDelta(
            self.op, self.table, self.row_id, self.client_id, self.columns, self.hlc, self.delta_id
        )


def encode_columns(columns: Sequence[ColumnDelta]) -> str:
    """Columns as the WAL stores them: a JSON array of ``{"column", "value"}``."""
    return _json_encode(columns).decode()  # a ColumnDelta struct encodes as that object


def decode_columns(text: str) -> tuple[ColumnDelta, ...]:
    """Inverse of :func:`encode_columns`."""
    return tuple(ColumnDelta(c["column"], c["value"]) for c in _json_decode(text))


class StoredRow(msgspec.Struct, frozen=True, gc=False):
    """A row as stored: its key, table, id, state, and the cursor of its last change.

    A struct, not a dataclass: pulls build a thousand per page, and a frozen dataclass's
    ``__init__`` costs six times as much.
    """

    row_key: str
    table: str
    row_id: str
    state: RowState
    position: int


@dataclass(frozen=True, slots=True)
class RowRecord:
    """What a client holds of a row: ``held`` once it applied the page ending at ``at_cursor``."""

    held: bool
    at_cursor: int


@dataclass(frozen=True, slots=True)
class GatewayCounters:
    """A gateway's counters, read under its write lock at the start of a push."""

    last_cursor: int
    appended_bytes: int
    flushed_bytes: int


@dataclass(frozen=True, slots=True)
class GatewayStats:
    """Counters for one gateway id (admin metrics, backpressure)."""

    gateway_id: str
    max_cursor: int
    flush_watermark: int
    backlog_entries: int
    backlog_bytes: int
    row_count: int
    live_rows: int
    log_entries: int = 0
    log_floor: int = 0


@dataclass(frozen=True, slots=True)
class WalStorage:
    """What the WAL's database takes: ``bytes`` on disk (SQLite: the database file and its
    ``-wal`` journal; PostgreSQL: the WAL's tables with their indexes and TOAST) and, of those,
    ``free_bytes`` kept for reuse (SQLite's free pages; ``None`` where the database does not
    say)."""

    bytes: int
    free_bytes: int | None


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """A request to flush a gateway's WAL to the lake, made through the admin route."""

    request_id: str
    gateway_id: str
    requested_ms: int
    status: str
    detail: str | None
    updated_ms: int


# ---------------------------------------------------------------------- push: plan, then commit


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """What a push transaction must read before it can be planned, and who pushed.

    ``stamped_ids`` are the batch's ``(hlc, deltaId)`` pairs in order (claimed: recorded as
    accepted, forever); ``row_keys`` the distinct rows it touches. ``client_id`` is the pushing
    client, whose delivery state the commit updates (``held_keys``: rows it may hold from now
    on; the cursor it last pulled from is read back) — ``None`` for a server-side append,
    which records no client delivery state.
    """

    stamped_ids: Sequence[tuple[int, str]]
    row_keys: Sequence[str]
    client_id: str | None = None
    held_keys: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class LoadedRows:
    """What a push transaction read under the gateway's lock: the planner's input.

    ``fresh_ids``: the claimed ``(hlc, deltaId)`` pairs not accepted before (a pair repeated
    in the batch counts once); ``states``: the stored state of each loaded row that exists.
    """

    counters: GatewayCounters
    fresh_ids: set[tuple[int, str]]
    states: dict[str, RowState]


class RowWrite(msgspec.Struct, frozen=True, gc=False):
    """A row state a push changes: the new state (as stored: JSON text) and its new position."""

    row_key: str
    table: str
    row_id: str
    state_json: str
    live: bool
    position: int


class NewColumn(msgspec.Struct, frozen=True, gc=False):
    """A column first accepted by a push: ``ordinal`` counts the table's known columns."""

    table: str
    column: str
    ordinal: int


@dataclass(slots=True)
class PushPlan:
    """Everything one push writes, decided before anything is written.

    ``entries`` are appended to the log; ``entries_columns_json[i]`` is the stored form of
    ``entries[i].columns`` (precomputed where the push could). ``rows`` are the row states
    that change — written, re-announced (``reannounced``: moved to a fresh cursor although
    the log got no entry for them) or both. ``last_cursor`` is the gateway's cursor after the
    push; ``added_bytes`` the backlog the entries add. ``refused`` are the indices (in the
    batch, and so in :attr:`AppendRequest.stamped_ids`) of the deltas the sync rules did not let
    the pusher write: the store releases their claimed ids, so a later push of the same delta is
    judged again rather than taken for a duplicate.
    """

    entries: list[WalEntry]
    entries_columns_json: list[str]
    rows: list[RowWrite]
    reannounced: list[str]
    new_columns: list[NewColumn]
    duplicates: int
    added_bytes: int
    last_cursor: int
    refused: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PushCommit:
    """A committed push: its plan, and the cursor the pushing client last pulled from (0 if
    it never pulled, or for a server-side append)."""

    plan: PushPlan
    last_since: int


PushPlanner = Callable[[LoadedRows], PushPlan]
"""A pure function from what a push transaction read to what it writes (it may raise: then
nothing is written)."""


@dataclass(frozen=True, slots=True)
class ActionClaim:
    """The outcome of claiming an action's keys (:meth:`WalStore.claim_action`).

    ``status`` is ``"claimed"`` (the caller now runs the action and must finish it),
    ``"stored"`` (it ran before: ``result_json`` is its stored result) or ``"running"``
    (another caller holds an unexpired claim on one of the keys).
    """

    status: str
    result_json: str | None = None


# ---------------------------------------------------------------------- the port


class RowReader(Protocol):
    """One consistent read of a gateway's row state, for one pulling client."""

    def scan(self, after: int, limit: int) -> list[StoredRow]:
        """Rows whose last change is after cursor ``after``, in cursor order."""
        ...

    def client_records(self, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What the pulling client holds of the rows ``keys``, as far as the server knows."""
        ...


class FeedReader(Protocol):
    """One consistent read of a gateway's row state for the broadcast feed: the rows, and what
    any of its clients hold of them."""

    def scan(self, after: int, limit: int) -> list[StoredRow]:
        """Rows whose last change is after cursor ``after``, in cursor order."""
        ...

    def delivery_records(
        self, client_ids: Sequence[str], keys: Sequence[str]
    ) -> dict[str, dict[str, RowRecord]]:
        """What each of ``client_ids`` holds of the rows ``keys``, as far as the server knows,
        by client id (clients that hold none of them are left out)."""
        ...


class WalStore(Protocol):
    """The durable log, row state, delivery state, config store and flush requests of every
    gateway id (each isolated by key)."""

    # -- the log: append, read, watermarks, trim, stats

    def append_changes(
        self, gw: str, request: AppendRequest, planner: PushPlanner, now_ms: int
    ) -> PushCommit:
        """In one transaction, under the gateway's lock: claim ids, load rows, plan, write.

        Nothing is written if ``planner`` raises; the commit is durable when this returns.
        """
        ...

    def read_entries(self, gw: str, after: int, limit: int = 10_000) -> list[WalEntry]:
        """Log entries with cursor > ``after``, ascending, at most ``limit``."""
        ...

    def gateway_ids(self) -> list[str]:
        """Every gateway id that has ever accepted a push or stored config."""
        ...

    def max_cursor(self, gw: str) -> int:
        """The last cursor handed out by ``gw`` (0 if none)."""
        ...

    def flush_watermark(self, gw: str) -> int:
        """The cursor up to which the lake holds this gateway's log."""
        ...

    def set_flush_watermark(self, gw: str, cursor: int) -> None:
        """Record that the lake holds every entry up to ``cursor`` (never moves backwards)."""
        ...

    def trim(self, gw: str, up_to: int, *, before_ms: int | None = None, batch: int = 2_000) -> int:
        """Delete log entries with cursor ≤ ``up_to`` that are in the lake (at or below the
        flush watermark) — with ``before_ms``, only the oldest run of them ingested before it —
        in transactions of at most ``batch`` entries (pushes go on between them); move the
        log's floor to the last trimmed cursor; return how many were deleted."""
        ...

    def trim_delta_ids(self, gw: str, before_hlc: int, *, batch: int = 2_000) -> int:
        """Forget the accepted ``deltaId``s of deltas stamped before ``before_hlc`` (the dedup
        horizon moves there), in transactions of at most ``batch``; return how many."""
        ...

    def log_floor(self, gw: str) -> int:
        """The cursor up to which the log was trimmed (0: never): entries at or below it are
        gone from the WAL and live in the lake only."""
        ...

    def dedup_horizon(self, gw: str) -> int:
        """The HLC before which accepted ids may have been forgotten (0: none were)."""
        ...

    def cursor_keeping(self, gw: str, entries: int) -> int:
        """The highest cursor that leaves the newest ``entries`` log entries above it (0 when
        the log holds no more than that)."""
        ...

    def storage(self) -> WalStorage:
        """What the whole WAL database takes on disk (every gateway)."""
        ...

    def reclaim(self) -> None:
        """Make the space of trimmed entries and ids reusable now (PostgreSQL: ``VACUUM`` of
        those tables, which blocks no reader or writer; elsewhere nothing to do)."""
        ...

    def stats(self, gw: str) -> GatewayStats:
        """Counters for ``gw``: cursor, flush watermark, backlog and row counts."""
        ...

    def oldest_unflushed_ms(self, gw: str) -> int | None:
        """Ingest time of the oldest entry not yet in the lake."""
        ...

    # -- row state and client delivery state

    def pull_read(
        self, gw: str, client_id: str, since: int, now_ms: int, *, record: bool = True
    ) -> AbstractContextManager[RowReader]:
        """Remember that ``client_id`` pulled from ``since`` (unless not ``record``), then read
        rows for its page."""
        ...

    def last_pulled_since(self, gw: str, client_id: str) -> int:
        """The cursor ``client_id`` last pulled from (0 if it never pulled)."""
        ...

    def has_pulled(self, gw: str, client_id: str) -> bool:
        """Whether ``client_id`` ever pulled from ``gw`` (a pull from 0 included)."""
        ...

    def save_client_records(
        self,
        gw: str,
        client_id: str,
        records: Mapping[str, RowRecord],
        expected: Mapping[str, RowRecord] | None = None,
    ) -> None:
        """Upsert what ``client_id`` holds of the rows ``records`` names. A row named in
        ``expected`` is written only if its record still is the one given there (read before
        the page was cut): one changed meanwhile — a push marked the row held, another page
        recorded it — is left as it is."""
        ...

    def client_records(self, gw: str, client_id: str, keys: Sequence[str]) -> dict[str, RowRecord]:
        """What ``client_id`` holds of the rows ``keys``, as far as the server knows (a read
        outside a pull of the WAL's own rows: a source pull's records)."""
        ...

    def feed_read(self, gw: str) -> AbstractContextManager[FeedReader]:
        """A read of rows and delivery records for the broadcast feed's pages (recording no
        client's pull)."""
        ...

    def save_delivery_records(
        self,
        gw: str,
        records: Mapping[str, Mapping[str, RowRecord]],
        expected: Mapping[str, Mapping[str, RowRecord]] | None = None,
    ) -> None:
        """Upsert what each client holds of the rows named, ``{client_id: {row_key: record}}``,
        in one transaction; ``expected`` as in :meth:`save_client_records`, per client."""
        ...

    def row_states(self, gw: str, table: str) -> Iterator[tuple[str, RowState]]:
        """Every row of ``table`` as ``(row_id, state)`` (tombstones included)."""
        ...

    # -- the config store

    def schemas(self, gw: str) -> dict[str, TableSchema]:
        """Registered table schemas of ``gw`` by table name."""
        ...

    def schema_versions(self, gw: str) -> dict[str, int]:
        """Version of each registered schema (1 on first save, +1 per evolution)."""
        ...

    def save_schema(self, gw: str, schema: TableSchema, now_ms: int = 0) -> TableSchema:
        """Register or evolve (additively) ``schema``; return the stored schema."""
        ...

    def sync_rules(self, gw: str) -> SyncRules | None:
        """The gateway's sync rules, or ``None`` if none were saved."""
        ...

    def save_sync_rules(self, gw: str, rules: SyncRules, now_ms: int = 0) -> None:
        """Replace the gateway's sync rules."""
        ...

    def table_columns(self, gw: str) -> dict[str, list[str]]:
        """Every column ever accepted, per table, in first-seen order."""
        ...

    # -- action results (idempotency)

    def claim_action(
        self,
        gw: str,
        client_id: str,
        keys: Sequence[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
    ) -> ActionClaim:
        """Claim ``keys`` (an action's id, and its idempotency key if any) for ``owner``.

        In one transaction: a stored result under any key wins (the first key's first); else an
        unexpired claim by someone else means ``running``; else every key is claimed for
        ``owner`` (a claim older than ``lease_ms`` — its owner crashed — is taken over). Two
        concurrent claims of one key — in one process or in several on one database — never
        both succeed.
        """
        ...

    def finish_action(
        self,
        gw: str,
        client_id: str,
        keys: Sequence[str],
        owner: str,
        result_json: str | None,
        now_ms: int,
    ) -> bool:
        """Store ``result_json`` under ``keys`` claimed by ``owner`` (``None``: release them, so
        the action may run again). ``False`` if ``owner`` no longer holds them."""
        ...

    def purge_actions(self, before_ms: int) -> int:
        """Forget stored results and claims last written before ``before_ms``; return how many."""
        ...

    # -- flush requests

    def request_flush(self, gw: str, now_ms: int) -> FlushRequest:
        """Queue a flush of ``gw`` for the pipeline; return the request."""
        ...

    def flush_requests(
        self, gw: str | None = None, status: str | None = "pending", limit: int = 100
    ) -> list[FlushRequest]:
        """Flush requests, newest last, filtered by gateway and status."""
        ...

    def recent_flush_requests(self, gw: str, limit: int) -> list[FlushRequest]:
        """The newest ``limit`` flush requests of ``gw`` whatever their status, newest last."""
        ...

    def update_flush_request(
        self, request_id: str, status: str, detail: str | None, now_ms: int
    ) -> None:
        """Record the progress or outcome of a flush request."""
        ...

    # -- lifecycle

    def ping(self) -> None:
        """Raise :class:`~lakesync_platform.core.errors.AdapterError` if the store is down."""
        ...

    def close(self) -> None:
        """Finish queued appends and release every resource."""
        ...


class ConnectorStore(Protocol):
    """The config store's connectors: registered configs and each stream's durable state."""

    def connectors(self, gw: str) -> dict[str, ConnectorConfig]:
        """The connectors registered for ``gw`` by name."""
        ...

    def save_connector(
        self, gw: str, cfg: ConnectorConfig, now_ms: int = 0, *, replace: bool = False
    ) -> None:
        """Register ``cfg`` (409 :class:`~.errors.ValidationError` if the name exists, unless
        ``replace``)."""
        ...

    def delete_connector(self, gw: str, name: str) -> bool:
        """Unregister ``name`` and drop its state; ``False`` if it was not registered."""
        ...

    def connector_state(self, gw: str, name: str) -> dict[str, dict[str, Any]]:
        """Each stream's saved state of connector ``name``."""
        ...

    def save_connector_state(
        self, gw: str, name: str, stream: str, state: dict[str, Any], now_ms: int = 0
    ) -> None:
        """Durably record ``stream``'s state."""
        ...
