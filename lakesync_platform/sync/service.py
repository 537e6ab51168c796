"""The sync engine's entry points: push, server-side append, pull, and the gateway's config.

:class:`SyncService` validates on the caller's thread (:mod:`.prepare`), lets the store run
one transaction per push — lock, claim ids, load rows (store) → plan (:mod:`.plan`, pure) →
write the plan (store) — and cuts pull pages from row state (:mod:`.pull`, :mod:`.delivery`).
It holds no state of its own but a short-lived cache of each gateway's configuration.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..core.checkpoint import (
    CURRENT_MANIFEST,
    STAMPED_FORMAT,
    CheckpointStore,
    decode_manifest,
)
from ..core.delta import DELETE, RowDelta
from ..core.errors import AdapterError, ValidationError, WriteForbiddenError
from ..core.merge import RowState
from ..core.schema import TableSchema
from ..core.sync_rules import Claims, ClientView, SyncRules
from ..core.wal import AppendRequest, LoadedRows, PushPlan, RowRecord, WalEntry, WalStore
from .checkpoint import checkpoint_frames
from .config import GatewayConfig, load_config
from .cursors import MAX_CURSOR, compose_cursor, split_cursor
from .delivery import PullPage
from .feed_cut import FeedPage, FeedWant, cut_feed_pages
from .plan import plan_append, plan_push
from .prepare import check_backlog, check_deltas, prepare
from .pull import cut_page
from .source_pull import DeltaLog, SourceCursor, SourceRows

__all__ = ["INGEST_CLIENT_PREFIX", "PushResult", "Refusal", "ServedCheckpoint", "SyncService"]

_CONFIG_TTL_S = 1.0
INGEST_CLIENT_PREFIX = "ingest:"
"""Server-side appends write as client ``ingest:<source>`` (e.g. ``ingest:jira``)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A delta of a push the sync rules did not let the client write, and why.

    The message says whether the table is closed to the client's writes or only this row; it
    never says whether the row exists (a hidden row and a missing one are refused alike).
    """

    delta: RowDelta
    error: WriteForbiddenError


def _refusal(view: ClientView, d: RowDelta) -> Refusal:
    if not view.table_writable(d.table):
        message = f'Table "{d.table}" is not writable by this client under the sync rules'
    else:
        message = f'The sync rules do not let this client write row "{d.row_id}" of "{d.table}"'
    return Refusal(d, WriteForbiddenError(message))


@dataclass(frozen=True, slots=True)
class PushResult:
    """Outcome of one push: ``accepted`` counts new and duplicate deltas; ``entries`` were added.

    ``server_hlc`` is the cursor the client last pulled from (0 if it never pulled);
    ``head`` the gateway's last cursor after the push (rows it moved end at or before it);
    ``refused`` the deltas the sync rules did not let the client write (not counted in
    ``accepted``; their rows are re-announced to the client).
    """

    accepted: int
    duplicates: int
    entries: tuple[WalEntry, ...]
    server_hlc: int
    head: int = 0
    refused: tuple[Refusal, ...] = ()


@dataclass(frozen=True, slots=True)
class ServedCheckpoint:
    """A checkpoint as one client is served it: ``cursor`` (``X-Checkpoint-Hlc``: the pull
    cursor it resumes from) and the length-prefixed ``frames``, read as they are consumed."""

    cursor: int
    frames: Iterator[bytes]


class SyncService:
    """Push, append and pull against a :class:`~lakesync_platform.core.wal.WalStore`; one
    instance serves every gateway id."""

    def __init__(
        self,
        wal: WalStore,
        clock: Callable[[], int],
        *,
        max_backlog_bytes: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wal = wal
        self._clock = clock
        self._monotonic = monotonic
        self.max_backlog_bytes = max_backlog_bytes
        self._configs: dict[str, GatewayConfig] = {}
        self._closed = False

    def close(self) -> None:
        """Refuse new pushes and appends (those already queued finish; the WAL stays open)."""
        self._closed = True

    # ------------------------------------------------------------------ config

    def config(self, gw: str, *, fresh: bool = False) -> GatewayConfig:
        """The gateway's config (schemas, rules, known columns), reloaded every second."""
        cached = self._configs.get(gw)
        if cached is not None and not fresh and self._monotonic() - cached.loaded < _CONFIG_TTL_S:
            return cached
        cfg = self._configs[gw] = load_config(self.wal, gw, self._monotonic())
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

    # ------------------------------------------------------------------ push and append

    def push(
        self,
        gw: str,
        client_id: str,
        deltas: Sequence[RowDelta],
        *,
        claims: Claims | None = None,
        any_client_ids: bool = False,
    ) -> PushResult:
        """Accept a client's batch whole or reject it whole (see :mod:`.plan`).

        Validation and everything that does not depend on stored state is done here, on the
        caller's thread; the store's writer only claims, loads, plans and writes.
        """
        self._check_open()
        now = self._clock()
        cfg = self.config(gw)
        prep = prepare(cfg, client_id, deltas, now, any_client_ids=any_client_ids)
        held: list[str] = []
        view = cfg.client_view(claims or {}, cfg.view_key(claims or {}))
        # An admin token (or auth off) writes anything, as Postgres's BYPASSRLS role does.
        guard = None if any_client_ids or not cfg.checks_writes else view
        if cfg.has_filters or guard is not None:
            # A client that wrote a row may hold it from now on — written or refused: a
            # refused row is re-announced, and a client that may hold it is sent its
            # DELETE if it is outside the view. A pushed DELETE proves nothing (deliveries
            # may have re-created the row locally since): never narrow what a client may
            # hold on push, only on confirmed deliveries.
            held = [d.key for d in deltas if d.op != DELETE and not view.table_unfiltered(d.table)]
        request = AppendRequest(
            [(d.hlc, d.delta_id) for d in deltas], list(dict.fromkeys(prep.keys)), client_id, held
        )
        columns, limit = cfg.columns, self.max_backlog_bytes

        def planner(loaded: LoadedRows) -> PushPlan:
            check_backlog(loaded.counters, limit)
            return plan_push(columns, loaded, deltas, prep, now, guard)

        commit = self.wal.append_changes(gw, request, planner, now)
        self._learn_columns(cfg, commit.plan)
        plan = commit.plan
        return PushResult(
            len(deltas) - len(plan.refused),
            plan.duplicates,
            tuple(plan.entries),
            commit.last_since,
            plan.last_cursor,
            tuple(_refusal(view, deltas[i]) for i in plan.refused),
        )

    def append(self, gw: str, source: str, deltas: Sequence[RowDelta]) -> tuple[WalEntry, ...]:
        """Append server-side changes (a connector's, written as client ``ingest:<source>``).

        Validated, merged and committed like a push (whole or nothing, deduplicated by
        ``(hlc, deltaId)``, backpressure included), but only the columns whose value changed
        are appended, nothing is re-announced, and no client delivery state is recorded.
        Returns the entries appended.
        """
        self._check_open()
        now = self._clock()
        cfg = self.config(gw)
        check_deltas(cfg, INGEST_CLIENT_PREFIX + source, deltas, now)
        request = AppendRequest(
            [(d.hlc, d.delta_id) for d in deltas], list(dict.fromkeys(d.key for d in deltas))
        )
        columns, limit = cfg.columns, self.max_backlog_bytes

        def planner(loaded: LoadedRows) -> PushPlan:
            check_backlog(loaded.counters, limit)
            return plan_append(columns, loaded, deltas, now)

        commit = self.wal.append_changes(gw, request, planner, now)
        self._learn_columns(cfg, commit.plan)
        return tuple(commit.plan.entries)

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterError("The sync service is shut down")

    @staticmethod
    def _learn_columns(cfg: GatewayConfig, plan: PushPlan) -> None:
        for new in plan.new_columns:
            cfg.add_column(new.table, new.column)

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
        feed: bool = False,
    ) -> PullPage:
        """One page of rows changed after cursor ``since``, as this client may see them.

        ``feed``: the page is pushed to the client (a broadcast), not asked for: ``since`` is
        the server's idea of the client's cursor, so it is not remembered as the cursor the
        client last pulled from (push responses and new sessions start from that one).
        """
        claims = claims or {}
        cfg = self.config(gw)
        view = cfg.client_view(claims, cfg.view_key(claims))
        tag = cfg.view_tag(claims)
        if not 0 <= since <= MAX_CURSOR:
            since = 0  # not a cursor of this gateway (and past the WAL's BIGINT): start over
        since_tag, since_pos = split_cursor(since)
        start = 0 if since_tag != tag else since_pos
        with self.wal.pull_read(gw, client_id, since, self._clock(), record=not feed) as rows:
            page = cut_page(
                rows, cfg, view, start=start, since_position=since_pos, limit=limit, stamped=stamped
            )
        if page.delivered:
            last = page.last_position
            self.wal.save_client_records(
                gw,
                client_id,
                {key: RowRecord(held, last) for key, held in page.delivered},
                page.read,
            )
        return PullPage(page.deltas, compose_cursor(tag, page.last_position), page.has_more)

    def feed_pages(
        self, gw: str, wants: Sequence[FeedWant], limit: int
    ) -> list[FeedPage | Exception]:
        """The broadcast page of each want — the page :meth:`pull` with ``feed=True`` would
        cut for it — cut together from one read (:mod:`.feed_cut`); the delivery records they
        set are saved, in one write, before this returns. An exception stands in for a page
        that could not be cut; a failure to read or save records raises."""
        cfg = self.config(gw)
        with self.wal.feed_read(gw) as reader:
            cut = cut_feed_pages(reader, cfg, wants, limit)
        if cut.records:
            self.wal.save_delivery_records(gw, cut.records, cut.read)
        return cut.pages

    def last_pulled_since(self, gw: str, client_id: str) -> int:
        """The cursor ``client_id`` last pulled from (0 if it never pulled): every row changed
        up to it has been delivered to that client, so a feed may start there."""
        return self.wal.last_pulled_since(gw, client_id)

    def head(self, gw: str) -> int:
        """The gateway's last ingest cursor: it grows with every commit, by any process."""
        return self.wal.max_cursor(gw)

    def pull_source(
        self,
        gw: str,
        source: str,
        log: DeltaLog,
        client_id: str,
        since: int,
        limit: int,
        *,
        claims: Claims | None = None,
        stamped: bool = False,
    ) -> PullPage:
        """One page of the rows of source ``source`` (its delta log ``log``) changed after
        source cursor ``since``, as this client may see them (see :mod:`.source_pull`).

        The pull of the gateway's own rows is not touched: the cursor a push answers with stays
        the one the client last pulled the gateway's rows from.
        """
        claims = claims or {}
        cfg = self.config(gw)
        tag = SourceCursor.tag_for(source, cfg.view_tag(claims))
        given = SourceCursor.decode(since)
        start = given if given is not None and given.tag == tag else SourceCursor(tag, 0, 0)
        since_hlc = 0 if given is None else given.hlc

        def records(keys: Sequence[str]) -> dict[str, RowRecord]:
            return self.wal.client_records(gw, client_id, keys)

        rows = SourceRows(log, source, start, records)
        page = cut_page(
            rows,
            cfg,
            ClientView(cfg.rules, claims),
            start=0,
            since_position=since_hlc,
            limit=limit,
            stamped=stamped,
            read_ahead=limit // (1 if stamped else 2) + 1,  # one latest_state read per row
        )
        cursor = rows.cursor_at(page.last_position) if page.has_more else rows.end
        if page.delivered:
            self.wal.save_client_records(
                gw,
                client_id,
                {key: RowRecord(held, cursor.hlc) for key, held in page.delivered},
                page.read,
            )
        return PullPage(page.deltas, cursor.encode(), page.has_more)

    def known_rows(self, gw: str, table: str) -> Mapping[str, RowState]:
        """The gateway's current row state of ``table`` (tests, checks, admin)."""
        return dict(self.wal.row_states(gw, table))

    # ------------------------------------------------------------------ checkpoint

    def checkpoint(
        self,
        gw: str,
        client_id: str | None,
        store: CheckpointStore,
        *,
        claims: Claims | None = None,
        stamped: bool = False,
    ) -> ServedCheckpoint | None:
        """The gateway's current checkpoint as ``client_id`` may see it (``None``: none yet).

        The rows are filtered by the caller's view as it is now and encoded per ``stamped``
        (:mod:`.checkpoint`); ``cursor`` is the checkpoint's position under the caller's view
        tag, so the pull that follows starts there. A client without stamps (the TS client)
        that has pulled before gets an empty checkpoint at cursor 0, i.e. "pull from the
        start": it asks again after every restart (its cursor lives in memory) while holding
        rows and queued writes, and its applier fails a whole batch on an ``INSERT`` that meets
        a queued ``INSERT`` of the same row — after a checkpoint it moves its cursor anyway and
        would miss those rows; a failed pull page it simply pulls again.
        """
        data = store.read(gw, CURRENT_MANIFEST)
        if data is None:
            return None
        try:
            manifest = decode_manifest(data)
        except ValidationError as exc:
            raise AdapterError(f"the checkpoint of {gw} is unreadable: {exc.message}") from exc
        if manifest.format != STAMPED_FORMAT:  # refused before the response starts
            raise AdapterError(f"the checkpoint of {gw} has chunks of format {manifest.format!r}")
        claims = claims or {}
        cfg = self.config(gw)
        if cfg.has_filters and client_id is None:
            raise ValidationError("clientId is required: sync rules filter this gateway's rows")
        if client_id is None:
            record = None  # no filtering rules: nothing to record
        else:
            if not stamped and self.wal.has_pulled(gw, client_id):
                return ServedCheckpoint(0, iter(()))
            record = functools.partial(self.wal.save_client_records, gw, client_id)
        view = ClientView(cfg.rules, claims)
        cursor = compose_cursor(cfg.view_tag(claims), manifest.cursor)
        frames = checkpoint_frames(
            store, gw, manifest, cfg, view, cursor=cursor, stamped=stamped, record=record
        )
        return ServedCheckpoint(cursor, frames)
