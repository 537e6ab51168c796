"""Simulated clients for convergence tests.

:class:`TsLikeClient` reproduces the unmodified LakeSync TypeScript client (PROTOCOL.md §12,
``packages/client/src/sync/{applier,engine}.ts``): a local table store with no per-column
stamps; whole-delta ``resolveLWW`` against the *last* pending entry of a row, with the pending
map built once per batch; a plain ``INSERT`` on an existing row fails the whole batch (rollback,
cursor not moved); ``UPDATE`` of a missing row does nothing; the cursor is set to a pull's
``serverHlc`` after a successful apply (``hasMore`` ignored, empty page ignored) and to the
push's ``serverHlc`` after a push; a restart keeps the local DB and the queue (IndexedDB) but
forgets the cursor. With ``bootstrap`` it runs the engine's ``initialSync`` whenever its cursor
is 0: the checkpoint's deltas applied as one batch, then the cursor set to ``X-Checkpoint-Hlc``
whatever the apply did (a 404 changes nothing).

:class:`StampedClient` is a well-behaved client: it keeps per-column stamps and pulls the
``stamped`` format, honouring ``hasMore``.

:class:`WsLink` is the TS ``WebSocketTransport``: a :class:`TsLikeClient` on it pushes and pulls
over a real socket and applies broadcast frames with ``handle_broadcast`` (the TS engine's:
apply, then cursor = max(cursor, serverHlc)); entries being pushed are invisible to the applier
meanwhile (``markSending``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from websockets.sync.client import connect

from lakesync_platform.core.delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from lakesync_platform.core.extract import extract_delta
from lakesync_platform.core.hlc import HLC
from lakesync_platform.core.merge import js_string_lt, stamp_gt
from lakesync_platform.core.proto import (
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    TAG_SYNC_PUSH,
    decode_sync_response,
    encode_sync_pull,
    encode_sync_push,
    frame,
)
from lakesync_platform.core.wire import delta_to_wire


class Pushed(NamedTuple):
    """A push's answer as a simulated client reads it: the cursor, and the ids of the deltas
    the sync rules refused (the TS client ignores them; a stamped client reverts their rows)."""

    server_hlc: int
    refused: frozenset[str] = frozenset()


class Gateway(Protocol):
    """What a simulated client talks to (in-process service or HTTP)."""

    def push(self, client_id: str, deltas: Sequence[RowDelta]) -> Pushed: ...

    def pull(
        self, client_id: str, since: int, limit: int, stamped: bool, source: str | None = None
    ) -> tuple[list[dict[str, Any]], int, bool]: ...

    def checkpoint(self, client_id: str) -> tuple[list[RowDelta], int] | None:
        """The checkpoint's deltas (every frame's, in order) and ``X-Checkpoint-Hlc``; ``None``
        for a 404."""
        ...


def delta_from_wire(d: Mapping[str, Any]) -> RowDelta:
    return RowDelta(
        d["op"],
        d["table"],
        d["rowId"],
        d["clientId"],
        tuple(ColumnDelta(c["column"], c["value"]) for c in d["columns"]),
        int(d["hlc"]),
        d["deltaId"],
    )


def resolve_lww(local: RowDelta, remote: RowDelta) -> RowDelta:
    """``packages/core/src/conflict/lww.ts`` (whole-delta winner)."""
    if local.hlc != remote.hlc:
        winner = remote if remote.hlc > local.hlc else local
    elif local.client_id != remote.client_id:
        winner = remote if js_string_lt(local.client_id, remote.client_id) else local
    else:
        winner = remote
    if local.op == DELETE and remote.op == DELETE:
        return RowDelta(
            DELETE, winner.table, winner.row_id, winner.client_id, (), winner.hlc, winner.delta_id
        )
    if local.op == DELETE or remote.op == DELETE:
        if winner.op == DELETE:
            return RowDelta(
                DELETE,
                winner.table,
                winner.row_id,
                winner.client_id,
                (),
                winner.hlc,
                winner.delta_id,
            )
        return winner
    op = INSERT if local.op == INSERT and remote.op == INSERT else UPDATE
    remote_cols = {c.column: c.value for c in remote.columns}
    local_cols = {c.column: c.value for c in local.columns}
    merged: list[ColumnDelta] = []
    for c in local.columns:
        if c.column in remote_cols:
            merged.append(
                ColumnDelta(c.column, (remote_cols if winner is remote else local_cols)[c.column])
            )
        else:
            merged.append(c)
    merged += [c for c in remote.columns if c.column not in local_cols]
    return RowDelta(
        op,
        winner.table,
        winner.row_id,
        winner.client_id,
        tuple(merged),
        winner.hlc,
        winner.delta_id,
    )


class ApplyError(Exception):
    pass


@dataclass
class _Entry:
    id: int
    delta: RowDelta


@dataclass
class TsLikeClient:
    """The unmodified TS client's behaviour, in memory."""

    client_id: str
    gateway: Gateway
    clock: Callable[[], int]
    rows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    queue: list[_Entry] = field(default_factory=list)
    cursor: int = 0
    failed_applies: int = 0
    sending: set[int] = field(default_factory=set)
    bootstrap: bool = False
    checkpoint_cursors: list[int] = field(default_factory=list)
    _next_id: int = 0

    def __post_init__(self) -> None:
        self.hlc = HLC(self.clock)

    # --- tracker -------------------------------------------------------------------------
    def _enqueue(self, delta: RowDelta | None) -> None:
        if delta is not None:
            self._next_id += 1
            self.queue.append(_Entry(self._next_id, delta))

    def insert(self, table: str, row_id: str, data: dict[str, Any]) -> bool:
        if (table, row_id) in self.rows:
            return False  # SQLite PK error in the tracker: the app sees an error
        self.rows[(table, row_id)] = dict(data)
        self._enqueue(
            extract_delta(
                None, data, table=table, row_id=row_id, client_id=self.client_id, hlc=self.hlc.now()
            )
        )
        return True

    def update(self, table: str, row_id: str, data: dict[str, Any]) -> bool:
        before = self.rows.get((table, row_id))
        if before is None:
            return False  # ROW_NOT_FOUND
        after = {**before, **data}
        self.rows[(table, row_id)] = after
        self._enqueue(
            extract_delta(
                before,
                after,
                table=table,
                row_id=row_id,
                client_id=self.client_id,
                hlc=self.hlc.now(),
            )
        )
        return True

    def delete(self, table: str, row_id: str) -> bool:
        before = self.rows.pop((table, row_id), None)
        if before is None:
            return False
        self._enqueue(
            extract_delta(
                before,
                None,
                table=table,
                row_id=row_id,
                client_id=self.client_id,
                hlc=self.hlc.now(),
            )
        )
        return True

    # --- engine --------------------------------------------------------------------------
    def push(self) -> None:
        entries = self.queue[:100]
        if not entries:
            return
        ids = {e.id for e in entries}
        self.sending = ids  # markSending: the applier's peek no longer sees them
        try:
            server = self.gateway.push(self.client_id, [e.delta for e in entries]).server_hlc
        except Exception:
            return  # nack: entries stay queued
        finally:
            self.sending = set()
        self.queue = [e for e in self.queue if e.id not in ids]
        self.cursor = server

    def pull(self, source: str | None = None) -> None:
        deltas, server, _has_more = self.gateway.pull(
            self.client_id, self.cursor, 1000, False, source
        )
        if not deltas:
            return
        if self._apply([delta_from_wire(d) for d in deltas]):
            self.cursor = server

    def handle_broadcast(self, deltas: list[RowDelta], server_hlc: int) -> None:
        """``engine.handleBroadcast``: apply; the cursor becomes the larger of the two."""
        if self._apply(deltas):
            self.cursor = max(self.cursor, server_hlc)

    def pull_from(self, source: str) -> None:
        """The engine's ``pullFrom(source)``: a pull with ``source`` set, on the same cursor."""
        self.pull(source)

    def initial_sync(self) -> None:
        """``engine.initialSync``: apply the checkpoint's deltas as one batch; the cursor becomes
        its ``X-Checkpoint-Hlc`` even when the batch failed."""
        fetched = self.gateway.checkpoint(self.client_id)
        if fetched is None:
            return
        deltas, snapshot = fetched
        self.checkpoint_cursors.append(snapshot)
        if deltas:
            self._apply(deltas)
        self.cursor = snapshot

    def sync_once(self) -> None:
        """PullFirstStrategy: [initialSync while the cursor is 0, with ``bootstrap``], pull,
        then push."""
        if self.bootstrap and self.cursor == 0:
            self.initial_sync()
        self.pull()
        self.push()

    def restart(self) -> None:
        """IndexedDB persistence: rows and queue survive, the in-memory cursor does not."""
        self.cursor = 0
        self.hlc = HLC(self.clock, *self.hlc.state)

    # --- applier -------------------------------------------------------------------------
    def _apply(self, deltas: list[RowDelta]) -> bool:
        saved_rows, saved_queue = copy.deepcopy(self.rows), list(self.queue)
        pending: dict[tuple[str, str], _Entry] = {}
        for e in self.queue:
            if e.id not in self.sending:
                pending[(e.delta.table, e.delta.row_id)] = e
        try:
            for remote in deltas:
                local = pending.get((remote.table, remote.row_id))
                if local is not None:
                    resolved = resolve_lww(local.delta, remote)
                    if resolved.client_id == remote.client_id and resolved.hlc == remote.hlc:
                        self._apply_sql(resolved)
                        self.queue = [e for e in self.queue if e.id != local.id]
                    continue
                self._apply_sql(remote)
        except ApplyError:
            self.rows, self.queue = saved_rows, saved_queue
            self.failed_applies += 1
            return False
        return True

    def _apply_sql(self, d: RowDelta) -> None:
        key = (d.table, d.row_id)
        if d.op == INSERT:
            if key in self.rows:
                raise ApplyError(f"UNIQUE constraint failed: {key}")
            self.rows[key] = {c.column: c.value for c in d.columns}
        elif d.op == UPDATE:
            if key in self.rows and d.columns:
                self.rows[key].update({c.column: c.value for c in d.columns})
        else:
            self.rows.pop(key, None)

    def visible_rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Local rows with NULL columns dropped (SQLite NULL == absent)."""
        return {k: {c: v for c, v in r.items() if v is not None} for k, r in self.rows.items()}


@dataclass
class StampedClient:
    """A well-behaved client: per-column stamps, ``format=stamped``, ``hasMore`` honoured."""

    client_id: str
    gateway: Gateway
    clock: Callable[[], int]
    # row -> column -> (value, hlc, client_id)
    rows: dict[tuple[str, str], dict[str, tuple[Any, int, str]]] = field(default_factory=dict)
    queue: list[RowDelta] = field(default_factory=list)
    cursor: int = 0

    def __post_init__(self) -> None:
        self.hlc = HLC(self.clock)

    def _write(self, table: str, row_id: str, data: dict[str, Any] | None) -> None:
        hlc = self.hlc.now()
        before = self.rows.get((table, row_id))
        plain = None if before is None else {c: v[0] for c, v in before.items()}
        delta = extract_delta(
            plain,
            None if data is None else {**(plain or {}), **data},
            table=table,
            row_id=row_id,
            client_id=self.client_id,
            hlc=hlc,
        )
        if delta is None:
            return
        if data is None:
            self.rows.pop((table, row_id), None)
        else:
            row = self.rows.setdefault((table, row_id), {})
            for c in delta.columns:
                row[c.column] = (c.value, hlc, self.client_id)
        self.queue.append(delta)

    def insert(self, table: str, row_id: str, data: dict[str, Any]) -> bool:
        if (table, row_id) in self.rows:
            return False
        self._write(table, row_id, data)
        return True

    def update(self, table: str, row_id: str, data: dict[str, Any]) -> bool:
        if (table, row_id) not in self.rows:
            return False
        self._write(table, row_id, data)
        return True

    def delete(self, table: str, row_id: str) -> bool:
        if (table, row_id) not in self.rows:
            return False
        self._write(table, row_id, None)
        return True

    def push(self) -> None:
        while self.queue:
            batch = self.queue[:100]
            try:
                pushed = self.gateway.push(self.client_id, batch)
            except Exception:
                return
            self.queue = self.queue[len(batch) :]
            for d in batch:
                if d.delta_id in pushed.refused:
                    # Our client's revert: forget the row and its stamps; the gateway
                    # re-announces it, so the next pull brings its state (or nothing).
                    self.rows.pop((d.table, d.row_id), None)

    def pull(self) -> None:
        while True:
            deltas, server, has_more = self.gateway.pull(self.client_id, self.cursor, 50, True)
            for d in deltas:
                self._apply(d)
            self.cursor = server
            if not has_more:
                return

    def _apply(self, d: Mapping[str, Any]) -> None:
        key = (d["table"], d["rowId"])
        local = self.rows.get(key, {})
        if d["op"] == DELETE:
            hlc, client = int(d["hlc"]), d["clientId"]
            kept = {c: v for c, v in local.items() if stamp_gt(v[1], v[2], hlc, client)}
        else:
            dh, dc = int(d["deleteHlc"]), d["deleteClientId"]
            remote = {c["column"]: (c["value"], int(c["hlc"]), c["clientId"]) for c in d["columns"]}
            kept = {}
            for name, (value, h, c) in remote.items():
                mine = local.get(name)
                kept[name] = (
                    mine if mine is not None and stamp_gt(mine[1], mine[2], h, c) else (value, h, c)
                )
            for name, mine in local.items():
                if name not in remote and stamp_gt(mine[1], mine[2], dh, dc):
                    kept[name] = mine
        if kept:
            self.rows[key] = kept
        else:
            self.rows.pop(key, None)

    def sync_once(self) -> None:
        self.pull()
        self.push()

    def restart(self) -> None:
        self.hlc = HLC(self.clock, *self.hlc.state)

    def visible_rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {
            k: {c: v[0] for c, v in r.items() if v[0] is not None} for k, r in self.rows.items()
        }


class WsLink:
    """One TS client's ``WebSocketTransport`` (``packages/client/src/sync/transport-ws.ts``) over
    a real socket: push and pull frames, each answered by the next untagged message; broadcast
    frames (``0x03``) are handed to ``on_broadcast`` as they arrive — also while a request waits
    for its reply, as the TS ``onmessage`` does."""

    def __init__(self, url: str, on_broadcast: Callable[[list[RowDelta], int], None]) -> None:
        self.url = url
        self.on_broadcast = on_broadcast
        self.broadcasts = 0
        self.ws = connect(url, max_size=None, legacy=True)

    def reconnect(self) -> None:
        """Drop the socket and open a new one (the TS transport's reconnect: no pull)."""
        self.ws.close()
        self.ws = connect(self.url, max_size=None, legacy=True)

    def close(self) -> None:
        """Close the socket."""
        self.ws.close()

    def _dispatch(self, message: bytes) -> bool:
        if message[0] != TAG_BROADCAST:
            return False
        deltas, server_hlc, _ = decode_sync_response(message[1:])
        self.broadcasts += 1
        self.on_broadcast(deltas, server_hlc)
        return True

    def _request(self, data: bytes) -> tuple[list[RowDelta], int, bool]:
        self.ws.send(data)
        while True:
            message = self.ws.recv(timeout=30)
            assert isinstance(message, bytes)
            if not self._dispatch(message):
                return decode_sync_response(message)

    def push(self, client_id: str, deltas: Sequence[RowDelta]) -> Pushed:
        """A ``0x01`` frame; the reply's ``serverHlc`` (the TS client reads nothing else)."""
        payload = encode_sync_push(client_id, deltas, 0)
        _, server_hlc, _ = self._request(frame(TAG_SYNC_PUSH, payload))
        return Pushed(server_hlc)

    def pull(
        self, client_id: str, since: int, limit: int, stamped: bool
    ) -> tuple[list[dict[str, Any]], int, bool]:
        """A ``0x02`` frame (the unstamped encoding only: protobuf carries no column stamps)."""
        assert not stamped
        deltas, server_hlc, has_more = self._request(
            frame(TAG_SYNC_PULL, encode_sync_pull(client_id, since, limit))
        )
        return [delta_to_wire(d) for d in deltas], server_hlc, has_more

    def pump(self, timeout: float) -> int:
        """Apply the broadcasts that arrive within ``timeout`` seconds of each other."""
        n = 0
        while True:
            try:
                message = self.ws.recv(timeout=timeout)
            except TimeoutError:
                return n
            assert isinstance(message, bytes) and self._dispatch(message)
            n += 1
