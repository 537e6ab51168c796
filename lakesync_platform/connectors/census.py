"""The delete census: an id-only sweep of a source, compared with the ids the WAL was given.

APIs that page by modification time never return what was deleted (Jira's search; Salesforce's
records purged from the recycle bin). Every ``every`` runs a :class:`CensusStream` sweeps the
source for the ids it holds now — ``(table, row_id)`` pairs, fetched page by page over HTTP
on the driver — and hands them to a :class:`CensusDiffer`, which compares them with the
*known* ids: those the previous census found, plus every id the connector appended to the WAL
since (a record created and deleted between two censuses is known too). Known ids the source
no longer holds become ``DELETE`` changes; source ids that are not known are *missing* (an
incremental poll missed them, or they were created during the sweep), which makes the census
inconsistent. Deleting a row that is not live appends nothing, so a known set larger than the
truth costs nothing.

The differ replaces its known set with the sweep only after the WAL committed the deletes
(:meth:`CensusDiffer.promote`, the page's ``after_commit``): a run killed before compares the
old set again next time. The production differ is a Spark job over Iceberg tables
(:mod:`lakesync_platform.spark.connector_census`); :class:`MemoryCensus` is its in-memory twin.

A sweep that runs out of API quota (:class:`~.model.QuotaReached`) abandons the census: nothing
is deleted or promoted, and it is due again on the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .model import Change, Page, QuotaReached

__all__ = ["CensusComparison", "CensusDiffer", "CensusStream", "MemoryCensus"]

_MISSING_SAMPLE = 10


@dataclass(frozen=True, slots=True)
class CensusComparison:
    """A sweep compared with the known ids: ``vanished`` (lazily: they may be many),
    how many were known and how many are missing, with a few missing ones."""

    vanished: Iterable[tuple[str, str]]
    known: int
    missing: int
    missing_sample: tuple[tuple[str, str], ...] = ()


class CensusDiffer(Protocol):
    """Compares a census's sweep with the known ids of one connector."""

    def stage(self, ids: Iterable[tuple[str, str]]) -> int:
        """Keep the sweep's ``(table, row_id)`` pairs aside; return how many there are."""
        ...

    def compare(self) -> CensusComparison:
        """The staged sweep against the known ids."""
        ...

    def promote(self) -> None:
        """Make the staged sweep the known ids (call once the deletes are committed)."""
        ...


@dataclass
class MemoryCensus:
    """A :class:`CensusDiffer` over sets: ``known`` is the previous sweep, ``ingested`` returns
    the ids appended since (the in-memory twin of the Spark census)."""

    ingested: Callable[[], Iterable[tuple[str, str]]] = lambda: ()
    known: set[tuple[str, str]] = field(default_factory=set)
    staged: set[tuple[str, str]] = field(default_factory=set)

    def stage(self, ids: Iterable[tuple[str, str]]) -> int:
        """Hold the sweep."""
        self.staged = set(ids)
        return len(self.staged)

    def compare(self) -> CensusComparison:
        """Known (and ingested) ids against the sweep."""
        known = self.known | set(self.ingested())
        missing = sorted(self.staged - known)
        return CensusComparison(
            sorted(known - self.staged),
            len(known),
            len(missing),
            tuple(missing[:_MISSING_SAMPLE]),
        )

    def promote(self) -> None:
        """The sweep becomes the known set."""
        self.known, self.staged = self.staged, set()


@dataclass
class CensusStream:
    """The census of one connector as a stream (state ``census``), due every ``every`` runs
    (0: never). ``sweep`` yields every ``(table, row_id)`` the source holds; ``differ`` opens
    the comparison (only when a census is due: it may start Spark); ``calls`` reads the
    session's API call count; ``clock`` is epoch milliseconds.

    State: ``runs`` (polls so far), ``lastCensusRun`` and ``last`` (the last census's report).
    :attr:`outcome` (after a run) says whether a census ran this run (``ranThisRun``), why one
    due was skipped (``skipped``), how many runs ago the last one ran (``runsSince``), every
    how many runs one is due (``every``), and the last census's report (``last``).
    """

    table: str
    every: int
    sweep: Callable[[], Iterator[tuple[str, str]]]
    differ: Callable[[], CensusDiffer]
    calls: Callable[[], int]
    clock: Callable[[], int]
    page_size: int = 500
    outcome: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        """State key."""
        return "census"

    def due(self, state: Mapping[str, Any]) -> bool:
        """Whether this run (the one after ``state``) takes a census."""
        runs = int(state.get("runs", 0)) + 1
        return self.every > 0 and runs - int(state.get("lastCensusRun", 0)) >= self.every

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """One empty page counting the run, or the census's deletes and its report."""
        runs = int(state.get("runs", 0)) + 1
        base = {**state, "runs": runs}
        since = runs - int(state.get("lastCensusRun", 0))
        self.outcome = {
            "ranThisRun": False,
            "every": self.every,
            "runsSince": since if "lastCensusRun" in state else None,
            "runs": runs,
            "last": state.get("last"),
        }
        if not self.due(state):
            yield Page([], base)
            return
        before = self.calls()
        differ = self.differ()
        try:
            swept = differ.stage(self.sweep())
        except QuotaReached:
            self.outcome["skipped"] = "quota reached"
            yield Page([], base, api_calls=self.calls() - before)
            return
        comparison = differ.compare()
        page: list[Change] = []
        vanished = 0
        for table, row_id in comparison.vanished:
            page.append(Change(row_id, None, table))
            vanished += 1
            if len(page) >= self.page_size:
                yield Page(page)
                page = []
        calls = self.calls() - before
        report: dict[str, Any] = {
            "at": self.clock(),
            "run": runs,
            "sourceIds": swept,
            "knownIds": comparison.known,
            "vanished": vanished,
            "missing": comparison.missing,
            "missingSample": [list(pair) for pair in comparison.missing_sample],
            "consistent": comparison.missing == 0,
            "apiCalls": calls,
        }
        self.outcome.update(ranThisRun=True, runsSince=0, last=report)
        yield Page(
            page,
            {**base, "lastCensusRun": runs, "last": report},
            after_commit=differ.promote,
            api_calls=calls,
        )
