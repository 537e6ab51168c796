"""When a failed send is tried again: one schedule for the outbox and the action queue.

Both queues (``_lakesync_outbox``, ``_lakesync_actions``) keep, per entry, ``status``,
``retry_count``, ``retry_after`` (epoch ms) and ``unreachable``, and follow the same rules:

* a failed send waits :func:`backoff_ms` of its retry count — ``min(1000·2^n, 30000)`` ms, no
  jitter, so an injected clock makes it exact — or the gateway's ``Retry-After``
  (:func:`min_delay_ms`), whichever is longer;
* the entry records whether the gateway could not be reached (:func:`is_unreachable`: no answer
  at all) or answered with a refusal;
* once the gateway answers again, entries that backed off because it could not be reached are
  due at once, while refused entries keep their backoff (the gateway asked for it).
  :class:`Outage` is that memory: every sender of the client reports its failures and answers
  to the one instance, and the first answer after an outage releases the entries of every queue
  (:func:`release_unreachable`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.errors import RateLimitedError
from ._db import LocalDB
from ._errors import TransportError

__all__ = [
    "BACKOFF_BASE_MS",
    "BACKOFF_CAP_MS",
    "Outage",
    "add_unreachable_column",
    "backoff_ms",
    "is_unreachable",
    "min_delay_ms",
    "release_unreachable",
]

BACKOFF_BASE_MS = 1000
BACKOFF_CAP_MS = 30_000


def backoff_ms(retry_count: int) -> int:
    """Delay before retry number ``retry_count``: ``min(1000·2^n, 30000)`` ms (no jitter)."""
    return min(BACKOFF_BASE_MS * (1 << min(max(retry_count, 0), 30)), BACKOFF_CAP_MS)


def min_delay_ms(error: BaseException) -> int:
    """The wait the gateway asked for with its refusal (a 429's ``Retry-After``), else 0."""
    return error.retry_after * 1000 if isinstance(error, RateLimitedError) else 0


def is_unreachable(error: BaseException) -> bool:
    """Whether a send failed without any answer from the gateway (connection refused, timeout,
    socket down) — as opposed to an answer that refused it."""
    return isinstance(error, TransportError) and error.status is None


def add_unreachable_column(db: LocalDB, table: str) -> None:
    """Give ``table`` (of a file an earlier version wrote) its ``unreachable`` column."""
    columns = db.query_tuples(f"PRAGMA table_info({table})")
    if "unreachable" not in {c[1] for c in columns}:
        db.exec(f"ALTER TABLE {table} ADD COLUMN unreachable INTEGER NOT NULL DEFAULT 0")


def release_unreachable(db: LocalDB, table: str) -> int:
    """Make the pending entries of ``table`` that backed off from an outage due now; returns
    how many (refused entries keep their backoff)."""
    with db.transaction():
        return db.exec(
            f"UPDATE {table} SET retry_after = 0, unreachable = 0 "
            "WHERE status = 'pending' AND unreachable = 1"
        )


class Outage:
    """Whether the gateway may have been unreachable since its last answer, shared by every
    sender of one client; :meth:`answered` ends an outage by running the queues' releases.

    It starts suspected, so entries a previous run left backing off from an outage are
    released by the first answer of this one too. Thread-safe.
    """

    def __init__(self) -> None:
        self._suspected = True
        self._lock = threading.Lock()
        self._releases: list[Callable[[], int]] = []

    def track(self, release: Callable[[], int]) -> None:
        """Run ``release`` (a queue's :func:`release_unreachable`) when an outage ends."""
        self._releases.append(release)

    def failed(self, error: BaseException) -> bool:
        """A send failed with ``error``; returns whether the gateway was unreachable."""
        unreachable = is_unreachable(error)
        if unreachable:
            with self._lock:
                self._suspected = True
        return unreachable

    def answered(self) -> int:
        """The gateway answered: after an outage, release the entries that backed off from it;
        returns how many became due."""
        with self._lock:
            if not self._suspected:
                return 0
            self._suspected = False
        return sum(release() for release in self._releases)
