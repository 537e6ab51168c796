"""Group commit: concurrent pushes share one transaction and one fsync.

Callers hand a function of a connection to :meth:`GroupCommitter.run` and block until it has
committed. One writer thread takes every job waiting at that moment (up to ``max_group``), runs
each inside its own savepoint of a single transaction — a job that raises is rolled back alone
and gets its own exception — and commits once. An acknowledged push is still committed before
its caller returns; it just shares the commit (and the disk flush) with its neighbours.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import AdapterError
from .store import WriteAheadLog

__all__ = ["GroupCommitter"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class _Job(Generic[T]):
    key: str
    fn: Callable[[Connection], T]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class GroupCommitter:
    """Runs write jobs on one thread, many per transaction (see the module docstring)."""

    def __init__(self, wal: WriteAheadLog, max_group: int = 64) -> None:
        self._wal = wal
        self._max_group = max_group
        self._cond = threading.Condition()
        self._queue: list[_Job[Any]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def run(self, key: str, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in a group transaction; return its result once committed.

        ``key`` orders jobs inside a group (the gateway id: locks are always taken in key
        order, so concurrent groups in several processes cannot deadlock).
        """
        job: _Job[T] = _Job(key, fn)
        with self._cond:
            if self._closed:
                raise AdapterError("The WAL writer is shut down")
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="lakesync-wal-writer", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        job.done.wait()
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    def close(self) -> None:
        """Finish queued jobs and stop the writer thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                group = self._queue[: self._max_group]
                del self._queue[: self._max_group]
            self._commit(sorted(group, key=lambda j: j.key))

    def _commit(self, group: list[_Job[Any]]) -> None:
        try:
            with self._wal.write() as conn:
                for job in group:
                    savepoint = conn.begin_nested()
                    try:
                        job.result = job.fn(conn)
                    except Exception as exc:  # each job fails alone; its savepoint is undone
                        savepoint.rollback()
                        job.error = (
                            AdapterError(f"WAL write failed: {exc}")
                            if isinstance(exc, SQLAlchemyError)
                            else exc
                        )
                    else:
                        savepoint.commit()
        except Exception as exc:  # the commit itself failed: nothing of the group is durable
            log.warning("WAL group commit of %d pushes failed: %s", len(group), exc)
            for job in group:
                job.result, job.error = None, exc
        finally:
            for job in group:
                job.done.set()
