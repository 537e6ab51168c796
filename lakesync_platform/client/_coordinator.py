"""The sync engine: pull remote pages, push the outbox, on demand or on a background thread.

``sync_once`` = initial checkpoint (first sync only, when the gateway offers one; a 404 means
none: the client pages from the start instead) → pull every page while ``hasMore`` → push
every due outbox batch → send every due queued action (:mod:`._actions`) → if anything was
pushed, pull once more, so the client holds the gateway's resolution of its own writes (columns
it lost, rows that left its view) when ``sync_once`` returns. Differences from the reference
coordinator (PROTOCOL.md §12), on purpose:

* the pull cursor is persisted, in the same transaction as the page it belongs to, and is never
  moved by a push response;
* ``hasMore`` is honoured;
* conflicts with unpushed local writes are resolved per column from the local stamps
  (:mod:`._applier`), not by comparing whole deltas with the last queued one;
* once the gateway answers again after an outage (the first successful pull, push or action
  request), outbox entries and queued actions backing off because it could not be reached are
  due at once, so the same ``sync_once`` sends them all; entries it refused keep their backoff
  (:mod:`._retry`, one :class:`~._retry.Outage` shared with the action queue);
* a batch the gateway rejects as malformed is bisected so one bad delta cannot hold back the
  others; dead-lettered entries stay visible (:meth:`SyncCoordinator.dead_letters`) and are
  reported through ``on_error`` — never dropped silently;
* a checkpoint carries per-column stamps and is applied frame by frame (each in its own
  transaction, by the same per-column rules as a pull page); the cursor moves to the
  checkpoint's only once every frame is applied, so an interrupted download is taken up again,
  never taken for whole. :meth:`SyncCoordinator.rebootstrap` replaces what the client holds
  by a fresh checkpoint (e.g. when the gateway no longer keeps the log back to its cursor).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, Literal, TypeVar

from ..core.errors import ClockDriftError
from ..core.hlc import HLC, encode
from ..core.stamped import StampedBlock
from ._actions import ActionQueue
from ._applier import apply_block, apply_rows, forget_rows
from ._db import LocalDB
from ._errors import DeadLetterError, TransportError, is_permanent
from ._kv import SyncState
from ._outbox import Outbox, OutboxEntry
from ._retry import Outage, min_delay_ms
from ._schemas import SchemaRegistry
from ._tracker import SyncTracker
from ._transport import Checkpoint, RealtimeTransport, RefusedWrite, Transport
from ._wire import CheckpointBatch, RemoteRow

__all__ = ["SyncCoordinator", "SyncMode", "SyncReport"]

log = logging.getLogger(__name__)

_SEEN_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS _lakesync_seen ("
    "tbl TEXT NOT NULL, row_id TEXT NOT NULL, PRIMARY KEY (tbl, row_id)) WITHOUT ROWID"
)
_SEEN_INSERT = "INSERT OR IGNORE INTO temp._lakesync_seen (tbl, row_id) VALUES (?, ?)"
_UNSEEN = (
    "SELECT s.row_id FROM _lakesync_stamps s WHERE s.tbl = ?1"
    " AND NOT EXISTS (SELECT 1 FROM temp._lakesync_seen x"
    " WHERE x.tbl = s.tbl AND x.row_id = s.row_id)"
    " AND NOT EXISTS (SELECT 1 FROM _lakesync_outbox o"
    " WHERE o.tbl = s.tbl AND o.row_id = s.row_id)"
)

SyncMode = Literal["full", "push_only", "pull_only"]
"""Which halves ``sync_once`` and auto-sync run."""


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one ``sync_once`` did: rows received, entries acknowledged, entries dead-lettered."""

    pulled: int
    pushed: int
    dead_lettered: int


T = TypeVar("T")


class _Listeners(Generic[T]):
    def __init__(self, name: str) -> None:
        self._name = name
        self._items: list[Callable[[T], None]] = []
        self._lock = threading.Lock()

    def add(self, fn: Callable[[T], None]) -> Callable[[], None]:
        with self._lock:
            self._items.append(fn)

        def remove() -> None:
            with self._lock:
                if fn in self._items:
                    self._items.remove(fn)

        return remove

    def emit(self, value: T) -> None:
        with self._lock:
            items = list(self._items)
        for fn in items:
            try:
                fn(value)
            except Exception:
                log.exception("%s listener %r failed", self._name, fn)


class SyncCoordinator:
    """Drives push and pull for one client; every public method is thread-safe."""

    def __init__(
        self,
        *,
        db: LocalDB,
        registry: SchemaRegistry,
        outbox: Outbox,
        state: SyncState,
        transport: Transport,
        tracker: SyncTracker,
        hlc: HLC,
        clock: Callable[[], int],
        sync_mode: SyncMode = "full",
        max_retries: int = 10,
        push_batch_size: int = 500,
        push_batch_bytes: int = 512 * 1024,
        pull_page_size: int = 1000,
        auto_sync_ms: int = 10_000,
        actions: ActionQueue | None = None,
    ) -> None:
        self._db = db
        self._registry = registry
        self._outbox = outbox
        self._state = state
        self.transport = transport
        """The transport in use."""
        self.tracker = tracker
        """Local writes (insert / update / delete / query)."""
        self.actions = actions
        """The queue of actions sent on each sync (``None``: actions are not used)."""
        self._hlc = hlc
        self._clock = clock
        self.sync_mode: SyncMode = sync_mode
        self.max_retries = max_retries
        self.push_batch_size = push_batch_size
        self.push_batch_bytes = push_batch_bytes
        self.pull_page_size = pull_page_size
        self.auto_sync_ms = auto_sync_ms
        self._sync_lock = threading.RLock()
        self._checkpoint_tried = False
        self._last_sync_ms: int | None = state.last_sync_ms
        self._last_dead = 0
        # One memory of outages for both queues (the action queue's, when there is one).
        self._outage = actions.outage if actions is not None else Outage()
        self._outage.track(outbox.end_outage)
        self._changes = _Listeners[frozenset[str]]("on_change")
        self._completes = _Listeners[SyncReport]("on_sync_complete")
        self._errors = _Listeners[BaseException]("on_error")
        self._refusals = _Listeners[tuple[RefusedWrite, ...]]("on_refused")
        self._reannounced = False  # a push had writes refused: pull again to get their rows
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        if isinstance(transport, RealtimeTransport):
            transport.on_broadcast(self.apply_broadcast)
            transport.on_resync(self._resync)

    # ---------------------------------------------------------------- events

    def on_change(self, listener: Callable[[frozenset[str]], None]) -> Callable[[], None]:
        """Call ``listener(tables)`` after a remote page changed those local tables.

        Returns a function that removes the listener. (Local writes are announced by
        :meth:`LocalDB.add_listener` and query watches.)
        """
        return self._changes.add(listener)

    def on_sync_complete(self, listener: Callable[[SyncReport], None]) -> Callable[[], None]:
        """Call ``listener(report)`` after each successful ``sync_once``."""
        return self._completes.add(listener)

    def on_refused(
        self, listener: Callable[[tuple[RefusedWrite, ...]], None]
    ) -> Callable[[], None]:
        """Call ``listener(refused)`` when the gateway's sync rules refused pushed writes: they
        are dead-lettered with the reason, their local rows reverted to the server's state."""
        return self._refusals.add(listener)

    def on_error(self, listener: Callable[[BaseException], None]) -> Callable[[], None]:
        """Call ``listener(error)`` when a sync fails or outbox entries are dead-lettered."""
        return self._errors.add(listener)

    # ---------------------------------------------------------------- status

    @property
    def client_id(self) -> str:
        """The identity this client pushes as."""
        return self.tracker.client_id

    @property
    def cursor(self) -> int:
        """The persisted pull cursor (0 = never pulled)."""
        return self._state.cursor

    @property
    def last_sync_time(self) -> datetime | None:
        """When the last successful pull or push finished (injected clock; survives restarts)."""
        if self._last_sync_ms is None:
            return None
        return datetime.fromtimestamp(self._last_sync_ms / 1000, tz=UTC)

    def queue_depth(self) -> int:
        """Outbox entries not yet acknowledged (dead letters excluded)."""
        return self._outbox.depth()

    def pending(self) -> list[OutboxEntry]:
        """Outbox entries waiting to be (re)sent, oldest first."""
        return self._outbox.entries("pending") + self._outbox.entries("sending")

    def dead_letters(self) -> list[OutboxEntry]:
        """Entries that gave up (``last_error`` says why); they stay until requeued/discarded."""
        return self._outbox.entries("dead")

    def retry_now(self) -> int:
        """Drop the backoff delays of pending entries (e.g. the network is back); returns how many.

        Retry counts are kept, so repeated failures still end in the dead letter.
        """
        return self._outbox.reset_backoff()

    def requeue_dead_letters(self, ids: Sequence[int] | None = None) -> int:
        """Send dead entries (all, or ``ids``) again from a fresh retry count."""
        return self._outbox.requeue_dead(ids)

    def discard_dead_letters(self, ids: Sequence[int] | None = None) -> int:
        """Drop dead entries for good (all, or ``ids``)."""
        return self._outbox.discard_dead(ids)

    # ---------------------------------------------------------------- pull

    def _observe(self, high: int) -> None:
        """Absorb ``high``, the newest stamp of rows just received (0: none)."""
        if high == 0:
            return
        with self._db.lock:
            try:
                self._hlc.recv(high)
            except ClockDriftError as exc:
                log.warning("remote stamp ahead of the local clock: %s", exc.message)

    def _apply(self, batch: CheckpointBatch, cursor: int | None, source: str | None = None) -> int:
        """Apply a page of rows (or a checkpoint's block) in one transaction and move the
        cursor (of ``source``, if given) to ``cursor`` there (``None``: leave it)."""
        with self._db.transaction():
            if isinstance(batch, StampedBlock):
                changed = apply_block(self._db, self._registry, batch)
                high = max(batch.hlcs, default=0)
            else:
                changed = apply_rows(self._db, self._registry, batch)
                high = max((r.hlc for r in batch), default=0)  # a row's hlc is its newest stamp
            if cursor is None:
                pass
            elif source is None:
                self._state.cursor = cursor
            else:
                self._state.set_source_cursor(source, cursor)
            self._observe(high)
            self._state.hlc_high = encode(*self._hlc.state)
            self._db.mark_changed(changed)
        if changed:
            self._changes.emit(frozenset(changed))
        return len(batch)

    def _initial_sync(self) -> int:
        try:
            checkpoint = self.transport.checkpoint(self.client_id)
            received = 0 if checkpoint is None else self._bootstrap(checkpoint, replace=False)
        except TransportError:
            raise  # unreachable: the pull could not work either; try again next time
        except Exception as exc:
            self._checkpoint_tried = True
            log.warning("checkpoint download failed; pulling from the start instead: %s", exc)
            self._errors.emit(exc)
            return 0
        self._checkpoint_tried = True
        return received

    def _bootstrap(self, checkpoint: Checkpoint, *, replace: bool) -> int:
        """Apply every batch of ``checkpoint`` (a transaction each), then move the cursor to it.

        ``replace``: afterwards drop the local rows the checkpoint lacks (deleted, or out of
        this client's view, by then), unless they have writes in the outbox.
        """
        received = 0
        try:
            if replace:
                self._db.exec(_SEEN_DDL)
                self._db.exec("DELETE FROM temp._lakesync_seen")
            for batch in checkpoint.batches:
                if replace:
                    keys = (
                        [(batch.table, row_id) for row_id in batch.row_ids]
                        if isinstance(batch, StampedBlock)
                        else [(r.table, r.row_id) for r in batch]
                    )
                    self._db.exec_many(_SEEN_INSERT, keys)
                received += self._apply(batch, None)
        finally:
            checkpoint.close()
        with self._db.transaction():
            swept = self._sweep_unseen() if replace else set()
            self._state.cursor = checkpoint.snapshot_hlc
            self._db.mark_changed(swept)
        if swept:
            self._changes.emit(frozenset(swept))
        return received

    def _sweep_unseen(self) -> set[str]:
        """Drop local rows missing from the checkpoint just applied and without outbox entries;
        returns the tables changed."""
        changed: set[str] = set()
        for (table,) in self._db.query_tuples("SELECT DISTINCT tbl FROM _lakesync_stamps"):
            gone = [(row_id,) for (row_id,) in self._db.query_tuples(_UNSEEN, [table])]
            if not gone:
                continue
            if self._registry.types(table) is not None:
                self._db.exec_many(f'DELETE FROM "{table}" WHERE _rowId = ?', gone)
            self._db.exec_many(
                "DELETE FROM _lakesync_stamps WHERE tbl = ? AND row_id = ?",
                [(table, row_id) for (row_id,) in gone],
            )
            changed.add(table)
        return changed

    def rebootstrap(self) -> int:
        """Replace what this client holds by the gateway's current checkpoint, then pull from it.

        Rows of the checkpoint are applied per column as any pull (unpushed local writes stay
        and are pushed later); local rows the checkpoint lacks are dropped unless they have
        writes in the outbox. Without a checkpoint the client pulls everything from the start.
        Returns the rows received. This is what a client does when the gateway can no longer
        serve a pull from its cursor.
        """
        with self._sync_lock:
            checkpoint = self.transport.checkpoint(self.client_id)
            self._checkpoint_tried = True
            if checkpoint is None:
                with self._db.lock:
                    self._state.cursor = 0
                received = 0
            else:
                received = self._bootstrap(checkpoint, replace=True)
            received += self._pull_pages(None)
            self._answered()
            self._synced()
            return received

    def pull(self) -> int:
        """Pull and apply every page (one transaction each); returns the rows received."""
        with self._sync_lock:
            received = 0
            if self._state.cursor == 0 and not self._checkpoint_tried:
                received += self._initial_sync()
            received += self._pull_pages(None)
            self._answered()
            self._synced()
            return received

    def apply_broadcast(self, rows: list[RemoteRow], server_hlc: int) -> None:
        """Apply rows the gateway broadcast (one transaction); the cursor becomes the larger
        of its own and ``server_hlc`` — a broadcast starts at or before the cursor, so nothing
        before ``server_hlc`` is missing. Ignored in ``push_only`` mode."""
        if self.sync_mode == "push_only" or not rows:
            return
        with self._sync_lock:
            self._apply(rows, max(self._state.cursor, server_hlc))

    def _resync(self) -> None:
        """After a (re)connection or on a heartbeat: pull what no broadcast brought."""
        if self.sync_mode == "push_only":
            return
        try:
            self.pull()
        except Exception as exc:
            log.info("resync pull failed: %s", exc)
            self._errors.emit(exc)

    def pull_from(self, source: str) -> int:
        """Pull and apply every page of the gateway's declared source ``source`` (its rows go
        to the same local tables); returns the rows received.

        Each source has its own persisted cursor, apart from the gateway's: pulling from a
        source never moves the gateway cursor, nor the other way round.
        """
        with self._sync_lock:
            received = self._pull_pages(source)
            self._synced()
            return received

    def _pull_pages(self, source: str | None) -> int:
        received = 0
        while True:
            since = self._state.cursor if source is None else self._state.source_cursor(source)
            page = self.transport.pull(self.client_id, since, self.pull_page_size, source)
            rows = page.rows
            received += self._apply(rows, page.server_hlc, source)
            if not page.has_more:
                return received
            if not rows or page.server_hlc == since:
                log.warning("gateway said hasMore with no progress at cursor %d", since)
                return received

    # ---------------------------------------------------------------- push

    def _dead(self, ids: list[int], error: BaseException) -> None:
        message = f"{len(ids)} outbox entries dead-lettered: {error}"
        log.error("%s", message)
        self._errors.emit(DeadLetterError(message, tuple(ids), error))

    def _send(self, batch: list[OutboxEntry]) -> tuple[int, int]:
        """Push ``sending`` entries; returns (acknowledged, dead-lettered)."""
        ids = [e.id for e in batch]
        try:
            with self._db.lock:
                last_seen = self._hlc.now()
            ack = self.transport.push(self.client_id, [e.delta for e in batch], last_seen)
        except Exception as exc:
            if is_permanent(exc):
                if len(batch) == 1:
                    self._outbox.dead_letter(ids, str(exc))
                    self._dead(ids, exc)
                    return 0, 1
                mid = len(batch) // 2
                try:
                    first = self._send(batch[:mid])
                except BaseException:
                    self._outbox.release(ids[mid:])
                    raise
                second = self._send(batch[mid:])
                return first[0] + second[0], first[1] + second[1]
            unreachable = self._outage.failed(exc)
            dead = self._outbox.nack(
                ids,
                self._clock(),
                str(exc),
                self.max_retries,
                min_delay_ms(exc),
                unreachable=unreachable,
            )
            if dead:
                self._dead(dead, exc)
            raise
        refused = {r.delta_id: r for r in ack.refused}
        kept = [e for e in batch if e.delta.delta_id not in refused]
        gone = [e for e in batch if e.delta.delta_id in refused]
        with self._db.transaction():  # forget the entries, remember their stamps
            self._outbox.ack([e.id for e in kept])
            for e in gone:  # a dead-letter row with the reason; the local row reverted
                r = refused[e.delta.delta_id]
                self._outbox.dead_letter([e.id], f"{r.code}: {r.message}")
            changed = forget_rows(
                self._db, self._registry, [(e.delta.table, e.delta.row_id) for e in gone]
            )
            self._state.hlc_high = encode(*self._hlc.state)
        self._answered()
        if gone:
            self._reannounced = True
            reasons = tuple(refused[e.delta.delta_id] for e in gone)
            log.warning("the gateway refused %d writes: %s", len(gone), reasons[0].message)
            self._refusals.emit(reasons)
            if changed:
                self._changes.emit(frozenset(changed))
        return len(kept), len(gone)

    def _answered(self) -> None:
        """A request succeeded: if it ends an outage, entries backing off from it are due."""
        released = self._outage.answered()
        if released:
            log.info("gateway answers again: %d outbox entries and actions due now", released)

    def push(self) -> int:
        """Push every due outbox entry in batches; returns how many were acknowledged.

        Raises the first transport/gateway failure after recording it on the entries (they
        are retried after the backoff; never re-stamped).
        """
        with self._sync_lock:
            acked = dead = 0
            rounds = self._outbox.depth() // max(self.push_batch_size, 1) + 2
            for _ in range(rounds):
                batch = self._outbox.take_batch(
                    self._clock(), self.push_batch_size, self.push_batch_bytes
                )
                if not batch:
                    break
                done, gone = self._send(batch)
                acked, dead = acked + done, dead + gone
            self.persist_clock()
            self._synced()
            self._last_dead = dead
            return acked

    def _synced(self) -> None:
        self._last_sync_ms = now = self._clock()
        with self._db.lock:
            self._state.last_sync_ms = now

    def persist_clock(self) -> None:
        """Store the clock's high-water mark so a restart never issues an older stamp."""
        with self._db.lock:
            self._state.hlc_high = encode(*self._hlc.state)

    # ---------------------------------------------------------------- cycle

    def sync_once(self) -> SyncReport:
        """One cycle per :attr:`sync_mode`; raises the first failure (after ``on_error``).

        A failed pull does not stop the push (and vice versa); both are attempted.
        """
        with self._sync_lock:
            failure: BaseException | None = None
            pulled = pushed = 0
            self._last_dead = 0
            if self.sync_mode != "push_only":
                try:
                    pulled = self.pull()
                except Exception as exc:
                    failure = exc
            if self.sync_mode != "pull_only":
                try:
                    pushed = self.push()
                except Exception as exc:
                    failure = failure or exc
                if self.actions is not None:
                    try:
                        self.actions.process(self.transport)
                    except Exception as exc:
                        failure = failure or exc
            reannounced, self._reannounced = self._reannounced, False
            if (pushed or reannounced) and failure is None and self.sync_mode == "full":
                try:
                    pulled += self.pull()
                except Exception as exc:
                    failure = exc
            if failure is not None:
                self._errors.emit(failure)
                raise failure
            report = SyncReport(pulled, pushed, self._last_dead)
        self._completes.emit(report)
        return report

    # ---------------------------------------------------------------- auto sync

    @property
    def auto_syncing(self) -> bool:
        """Whether the background sync thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start_auto_sync(self, interval_ms: int | None = None) -> None:
        """Run ``sync_once`` now and then every ``interval_ms`` on a background thread."""
        if interval_ms is not None:
            self.auto_sync_ms = interval_ms
        if self.auto_syncing:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"lakesync-sync-{self.client_id}", daemon=True
        )
        self._thread.start()

    def request_sync(self) -> None:
        """Wake the background thread to sync now (no-op without auto-sync)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception as exc:  # already reported through on_error
                log.info("auto-sync cycle failed: %s", exc)
            self._wake.wait(self.auto_sync_ms / 1000)
            self._wake.clear()

    def stop_auto_sync(self, timeout_s: float = 30.0) -> None:
        """Stop the background thread and wait for its current cycle to finish."""
        thread = self._thread
        self._stop.set()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                log.warning("auto-sync thread did not stop within %.1fs", timeout_s)
        self._thread = None
