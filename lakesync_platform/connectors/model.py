"""A connector's streams, declared as data, and what a stream yields: pages of changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.schema import TableSchema

__all__ = ["Change", "Page", "QuotaReached", "RunReport", "Stream", "StreamReport"]


class QuotaReached(Exception):
    """The source's API budget for this run is spent: streams stop at their last page (their
    cursors stay where the WAL is), and the run ends as a success that says so."""


@dataclass(frozen=True, slots=True)
class Change:
    """One source row as the gateway's table will hold it: ``row`` is ``None`` when the
    source deleted it (the row id column is not part of ``row``). ``table`` is the stream's
    table unless given (a stream whose pages carry rows of several tables: Jira's issues and
    their comments)."""

    row_id: str
    row: Mapping[str, Any] | None
    table: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """Changes read together, and the stream state that holds once they are committed.

    ``state`` ``None`` keeps the previous state; ``after_commit`` runs once the page's changes
    are in the WAL and its state is saved (e.g. a diff replaces its snapshot then).
    ``schemas`` are table schemas the page's rows need: their columns are added (additively) to
    the gateway's tables before the page's changes are appended (a source field that appeared
    since the last run becomes a new column).
    """

    changes: Sequence[Change]
    state: Mapping[str, Any] | None = None
    after_commit: Callable[[], None] | None = None
    api_calls: int = 0
    schemas: Sequence[TableSchema] = ()


class Stream(Protocol):
    """A named source of pages for one table of the gateway."""

    @property
    def name(self) -> str:
        """The key its state is saved under (unique within the connector)."""
        ...

    @property
    def table(self) -> str:
        """The gateway table its changes are written to."""
        ...

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """Pages of changes after ``state`` (``{}`` on the first run); lazily, so a run holds
        one page at a time."""
        ...


@dataclass(slots=True)
class StreamReport:
    """What one stream did in a run (run metadata)."""

    stream: str
    table: str
    records: int = 0
    pages: int = 0
    api_calls: int = 0
    deltas: dict[str, int] = field(default_factory=dict)
    state_before: Mapping[str, Any] = field(default_factory=dict)
    state_after: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RunReport:
    """What one run of a connector did, stream by stream."""

    connector: str
    gateway: str
    streams: list[StreamReport] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str | None = None
    """Why the run ended before its streams were exhausted (``"quota reached"``), else None."""
    quota: Mapping[str, Any] | None = None
    """The source's API quota as last seen (``used``, ``limit``, ``share``, ``budget``)."""
    census: Mapping[str, Any] | None = None
    """The delete census of this run, or the last one (``ran_this_run`` tells them apart)."""

    @property
    def records(self) -> int:
        """Source records read by every stream."""
        return sum(s.records for s in self.streams)

    @property
    def deltas(self) -> dict[str, int]:
        """WAL entries appended, by operation."""
        out: dict[str, int] = {}
        for s in self.streams:
            for op, n in s.deltas.items():
                out[op] = out.get(op, 0) + n
        return out
