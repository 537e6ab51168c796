"""Actions from the client (PROTOCOL.md §8): a persistent queue, sent now or on the next sync.

An action is stamped (``hlc.now()``), given its content ``actionId`` and written to
``_lakesync_actions`` in the client's SQLite file before anything is sent, so an action the app
asked for survives a crash or an offline spell. Life of an entry::

    pending ──take──▶ sending ──result──▶ done (its result kept)
       ▲                 │
       └──nack (backoff)─┘  (a transport failure, or a retryable error result)

Every send of an action — the HTTP transport's own retries, the queue's later retries, after a
restart — carries the same ``actionId`` and ``idempotencyKey``, so the gateway runs it once and
answers the retries with the stored result. Unlike the reference client (which acknowledges a
retryable error result and drops the action), a retryable error result (``ACTION_TIMEOUT``,
``ACTION_IN_PROGRESS``, a handler's transient failure) is retried with the outbox's backoff until
the gateway gives a final answer, or ``max_retries`` sends have failed (then the last error is
the action's result). ``on_action_complete`` listeners hear every final result.

Retries follow the outbox's rules (:mod:`._retry`): actions that backed off because the gateway
could not be reached are due at once when it answers again — to a pull, a push or an action,
through the client's one :class:`~._retry.Outage` — while those it refused (a retryable result,
a 5xx, a 429 with its ``Retry-After``) keep their backoff.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..core.actions import (
    Action,
    ActionErrorResult,
    ActionResult,
    action_result_from_json,
    validate_action,
)
from ..core.hlc import HLC
from ..core.ids import action_id
from ._db import LocalDB
from ._retry import (
    Outage,
    add_unreachable_column,
    backoff_ms,
    min_delay_ms,
    release_unreachable,
)

__all__ = [
    "ACTIONS_DDL",
    "ActionEntry",
    "ActionQueue",
    "ActionResponse",
    "ActionTransport",
]

ACTIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS _lakesync_actions ("
    "id INTEGER PRIMARY KEY AUTOINCREMENT, action_id TEXT NOT NULL UNIQUE, hlc INTEGER NOT NULL, "
    "action BLOB NOT NULL, "
    "status TEXT NOT NULL DEFAULT 'pending', retry_count INTEGER NOT NULL DEFAULT 0, "
    "retry_after INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, result BLOB, "
    "last_error TEXT, unreachable INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS _lakesync_actions_status ON _lakesync_actions (status, id)",
)
BATCH = 100
"""Actions per request (the gateway's limit, and the reference client's batch)."""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

Result = ActionResult | ActionErrorResult


@dataclass(frozen=True, slots=True)
class ActionResponse:
    """The gateway's answer to a request of actions: one result each, in order."""

    results: list[Result]
    server_hlc: int


@runtime_checkable
class ActionTransport(Protocol):
    """A transport that can send actions (the HTTP transport can; others may not)."""

    def execute_actions(self, client_id: str, actions: Sequence[Action]) -> ActionResponse:
        """Send a request of actions; raises if the gateway could not be reached or refused it."""
        ...

    def describe_actions(self) -> dict[str, Any]:
        """The gateway's connectors and their action types (``{"connectors": {…}}``)."""
        ...


@dataclass(frozen=True, slots=True)
class ActionEntry:
    """One queued action, its delivery state and (once done) its result."""

    id: int
    action: Action
    status: str
    retry_count: int
    retry_after: int
    created_at: int
    result: Result | None
    last_error: str | None


def _entry(row: tuple[Any, ...]) -> ActionEntry:
    id_, blob, status, retries, after, created, result, error = row
    return ActionEntry(
        id_,
        validate_action(_decoder.decode(blob)),
        status,
        retries,
        after,
        created,
        None if result is None else action_result_from_json(_decoder.decode(result)),
        error,
    )


_COLUMNS = "id, action, status, retry_count, retry_after, created_at, result, last_error"


class ActionQueue:
    """``_lakesync_actions`` and the sending of its entries (thread-safe through the db lock).

    ``outage`` is the client's memory of the gateway being unreachable, shared with the sync
    coordinator (which adopts this queue's when given one): an answer to either ends it for
    both queues.
    """

    def __init__(
        self,
        db: LocalDB,
        hlc: HLC,
        client_id: str,
        clock: Callable[[], int],
        max_retries: int = 10,
        outage: Outage | None = None,
    ) -> None:
        self._db = db
        self._hlc = hlc
        self._client_id = client_id
        self._clock = clock
        self.max_retries = max_retries
        self._listeners: list[Callable[[str, Result], None]] = []
        self.outage = outage if outage is not None else Outage()
        """Shared with the coordinator: an answer after an outage releases both queues."""
        self.outage.track(self.end_outage)

    @staticmethod
    def create(db: LocalDB) -> int:
        """Create the table if needed; entries a crash left ``sending`` go back to pending.

        Returns the newest HLC ever queued (0 if none), so a reopened client never stamps an
        action with an older one. Call it before the client's clock is built.
        """
        with db.transaction():
            for ddl in ACTIONS_DDL:
                db.exec(ddl)
            add_unreachable_column(db, "_lakesync_actions")  # a file of an earlier version
            db.exec("UPDATE _lakesync_actions SET status = 'pending' WHERE status = 'sending'")
            return int(db.query_tuples("SELECT max(hlc) FROM _lakesync_actions")[0][0] or 0)

    def on_complete(self, listener: Callable[[str, Result], None]) -> Callable[[], None]:
        """Call ``listener(action_id, result)`` for each action's final result."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def enqueue(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> Action:
        """Stamp ``params`` as a new action and queue it (durably, before anything is sent)."""
        with self._db.transaction():
            hlc = self._hlc.now()
            action = Action(
                action_id(self._client_id, hlc, connector, action_type, params),
                self._client_id,
                hlc,
                connector,
                action_type,
                dict(params),
                idempotency_key,
            )
            self._db.exec(
                "INSERT INTO _lakesync_actions (action_id, hlc, action, created_at)"
                " VALUES (?, ?, ?, ?)",
                (action.action_id, hlc, _encoder.encode(action.to_json()), self._clock()),
            )
        return action

    def entries(self, status: str | None = None) -> list[ActionEntry]:
        """All entries (or those in ``status``), oldest first."""
        where = "" if status is None else "WHERE status = ?"
        rows = self._db.query_tuples(
            f"SELECT {_COLUMNS} FROM _lakesync_actions {where} ORDER BY id",
            () if status is None else (status,),
        )
        return [_entry(r) for r in rows]

    def result(self, action_id: str) -> Result | None:
        """The final result of an action, or ``None`` while it is not done."""
        rows = self._db.query_tuples(
            "SELECT result FROM _lakesync_actions WHERE action_id = ? AND status = 'done'",
            (action_id,),
        )
        return action_result_from_json(_decoder.decode(rows[0][0])) if rows else None

    def depth(self) -> int:
        """Actions not done yet."""
        rows = self._db.query_tuples(
            "SELECT count(*) FROM _lakesync_actions WHERE status != 'done'"
        )
        return int(rows[0][0])

    def end_outage(self) -> int:
        """The gateway answers again: actions backing off because it could not be reached
        become due now (refused ones keep their backoff); returns how many."""
        return release_unreachable(self._db, "_lakesync_actions")

    def forget_done(self) -> int:
        """Drop done entries (their results were reported); returns how many."""
        with self._db.transaction():
            return self._db.exec("DELETE FROM _lakesync_actions WHERE status = 'done'")

    def _take(self, only: str | None) -> list[ActionEntry]:
        with self._db.transaction():
            sql = f"SELECT {_COLUMNS} FROM _lakesync_actions WHERE status = 'pending' AND "
            if only is None:
                rows = self._db.query_tuples(
                    sql + "retry_after <= ? ORDER BY id LIMIT ?", (self._clock(), BATCH)
                )
            else:
                rows = self._db.query_tuples(sql + "action_id = ?", (only,))
            batch = [_entry(r) for r in rows]
            self._db.exec_many(
                "UPDATE _lakesync_actions SET status = 'sending' WHERE id = ?",
                [(e.id,) for e in batch],
            )
        return batch

    def process(self, transport: object, only: str | None = None) -> list[Result]:
        """Send due actions (or just the action ``only``) in batches; returns the final results.

        Without an :class:`ActionTransport` nothing is sent. A transport failure puts the batch
        back with a backoff and is raised. An answer that ends an outage makes the entries
        backing off from it due (:class:`~._retry.Outage`), so this call sends them too.
        """
        if not isinstance(transport, ActionTransport):
            return []
        finished: list[Result] = []
        while batch := self._take(only):
            try:
                response = transport.execute_actions(self._client_id, [e.action for e in batch])
            except Exception as exc:
                self._nack(batch, exc)
                raise
            finished += self._record(batch, response.results)
            self.outage.answered()
            if only is not None:
                break
        for result in finished:
            for listener in list(self._listeners):
                listener(result.action_id, result)
        return finished

    def _nack(self, batch: Sequence[ActionEntry], error: Exception) -> None:
        """The request failed: back off, remembering whether the gateway was unreachable."""
        now = self._clock()
        unreachable = self.outage.failed(error)
        wait = min_delay_ms(error)
        with self._db.transaction():
            self._db.exec_many(
                "UPDATE _lakesync_actions SET status = 'pending', retry_count = ?,"
                " retry_after = ?, last_error = ?, unreachable = ? WHERE id = ?",
                [
                    (
                        e.retry_count + 1,
                        now + max(backoff_ms(e.retry_count + 1), wait),
                        str(error),
                        unreachable,
                        e.id,
                    )
                    for e in batch
                ],
            )

    def _record(self, batch: list[ActionEntry], results: Sequence[Result]) -> list[Result]:
        by_id = {r.action_id: r for r in results}
        finished: list[Result] = []
        with self._db.transaction():
            for entry in batch:
                result = by_id.get(entry.action.action_id)
                if result is None or (
                    isinstance(result, ActionErrorResult)
                    and result.retryable
                    and entry.retry_count + 1 < self.max_retries
                ):
                    error = "no result" if result is None else f"{result.code}: {result.message}"
                    self._db.exec(  # a refusal: it keeps its backoff after an outage
                        "UPDATE _lakesync_actions SET status = 'pending', retry_count = ?,"
                        " retry_after = ?, last_error = ?, unreachable = 0 WHERE id = ?",
                        (
                            entry.retry_count + 1,
                            self._clock() + backoff_ms(entry.retry_count + 1),
                            error,
                            entry.id,
                        ),
                    )
                    continue
                assert result is not None
                self._db.exec(
                    "UPDATE _lakesync_actions SET status = 'done', result = ? WHERE id = ?",
                    (_encoder.encode(result.to_json()), entry.id),
                )
                finished.append(result)
        return finished
