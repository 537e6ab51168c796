"""Run a connector's streams: pages → deltas in chunks → the WAL → then, only then, state.

Every change becomes a full-row ``INSERT`` (or a ``DELETE``) written as client
``ingest:<connector>`` with an HLC from the injected clock; the WAL's server-side append
(``SyncService.append``) merges it per column and appends only the columns whose value
changed, so a re-polled record that did not change appends nothing and the delta ids are a
pure function of the content and the HLC.

Deltas go to the WAL in chunks of ``chunk_size``. A page's state (its cursor) is saved only
once every delta of the page — and of every page before it — is committed: a run killed at any
point re-reads, on its next run, at most the pages after the last saved state, and those
re-read changes append nothing the WAL already holds. Memory is bounded by one page plus one
chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..core.delta import DELETE, INSERT, ColumnDelta, RowDelta
from ..core.hlc import HLC
from ..core.ids import delta_id
from ..core.schema import TableSchema
from ..core.wal import ConnectorStore, WalEntry
from .model import Change, Page, RunReport, Stream, StreamReport

__all__ = ["Append", "EnsureSchema", "change_delta", "run_streams"]

Append = Callable[[Sequence[RowDelta]], Sequence[WalEntry]]
"""Commit deltas to the WAL (whole or nothing) and return the entries appended."""
EnsureSchema = Callable[[TableSchema], None]
"""Give a gateway table at least the columns of a schema (additive evolution)."""


def change_delta(change: Change, table: str, client_id: str, hlc: int) -> RowDelta:
    """The delta of one change: the full row as ``INSERT`` (the append keeps only what
    changed), or ``DELETE``."""
    if change.row is None:
        columns: tuple[ColumnDelta, ...] = ()
        op = DELETE
    else:
        columns = tuple(ColumnDelta(k, v) for k, v in change.row.items())
        op = INSERT
    table = change.table or table
    return RowDelta(
        op, table, change.row_id, client_id, columns, hlc,
        delta_id(client_id, hlc, table, change.row_id, columns),
    )  # fmt: skip


class _Chunker:
    """Deltas waiting for the WAL, and the page states waiting for those deltas."""

    def __init__(
        self, append: Append, save: Callable[[Mapping[str, Any]], None], report: StreamReport
    ) -> None:
        self.append = append
        self.save = save
        self.report = report
        self.deltas: list[RowDelta] = []
        self.waiting: list[Page] = []

    def commit(self) -> None:
        """Append the pending deltas, then save the newest state they complete."""
        if self.deltas:
            for entry in self.append(self.deltas):
                self.report.deltas[entry.op] = self.report.deltas.get(entry.op, 0) + 1
            self.deltas = []
        pages, self.waiting = self.waiting, []
        states = [p.state for p in pages if p.state is not None]
        if states:
            self.save(states[-1])
            self.report.state_after = states[-1]
        for page in pages:
            if page.after_commit is not None:
                page.after_commit()


def run_streams(
    streams: Iterable[Stream],
    *,
    gw: str,
    connector: str,
    append: Append,
    store: ConnectorStore,
    clock: Callable[[], int],
    chunk_size: int = 500,
    monotonic: Callable[[], float] = time.monotonic,
    ensure_schema: EnsureSchema | None = None,
) -> RunReport:
    """Poll every stream once; see the module docstring for what is committed when.

    ``ensure_schema`` receives the schemas a page declares (:attr:`Page.schemas`) before its
    changes are appended."""
    started = monotonic()
    client_id = f"ingest:{connector}"
    hlc = HLC(clock)
    saved = store.connector_state(gw, connector)
    run = RunReport(connector, gw)
    for stream in streams:
        before = saved.get(stream.name, {})
        report = StreamReport(stream.name, stream.table, state_before=before, state_after=before)
        run.streams.append(report)

        def save(state: Mapping[str, Any], name: str = stream.name) -> None:
            store.save_connector_state(gw, connector, name, dict(state), clock())

        chunker = _Chunker(append, save, report)
        for page in stream.pages(before):
            report.pages += 1
            report.api_calls += page.api_calls
            if ensure_schema is not None:
                for schema in page.schemas:
                    ensure_schema(schema)
            for change in page.changes:
                report.records += 1
                chunker.deltas.append(change_delta(change, stream.table, client_id, hlc.now()))
                if len(chunker.deltas) >= chunk_size:
                    chunker.commit()
            chunker.waiting.append(page)
            if not chunker.deltas:
                chunker.commit()
        chunker.commit()
    run.seconds = monotonic() - started
    return run
