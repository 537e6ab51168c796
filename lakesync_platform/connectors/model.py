"""A connector's streams, declared as data, and what a stream yields: pages of changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Change", "Page", "RunReport", "Stream", "StreamReport"]


@dataclass(frozen=True, slots=True)
class Change:
    """One source row as the gateway's table will hold it: ``row`` is ``None`` when the
    source deleted it (the row id column is not part of ``row``)."""

    row_id: str
    row: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Page:
    """Changes read together, and the stream state that holds once they are committed.

    ``state`` ``None`` keeps the previous state; ``after_commit`` runs once the page's changes
    are in the WAL and its state is saved (e.g. a diff replaces its snapshot then).
    """

    changes: Sequence[Change]
    state: Mapping[str, Any] | None = None
    after_commit: Callable[[], None] | None = None
    api_calls: int = 0


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
