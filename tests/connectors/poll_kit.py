"""Polling an HTTP source into an in-memory WAL, as the pipeline does, with the in-memory
census: the connectors' tests against the fake servers use it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lakesync_platform.connectors.census import CensusStream, MemoryCensus
from lakesync_platform.connectors.http import HttpSettings, SessionFactory, session_factory
from lakesync_platform.connectors.model import RunReport, Stream
from lakesync_platform.connectors.runner import run_streams
from lakesync_platform.pipeline.connectors import ensure_columns
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import ManualClock
from lakesync_platform.wal.memory import MemoryWal

GW = "gw1"
FAST: SessionFactory = session_factory(
    HttpSettings(timeout_s=5.0, tries=3, backoff_s=0.01, backoff_max_s=0.05)
)
"""Sessions that retry quickly (a 5xx backs off 10 ms, not half a second)."""


@dataclass
class Poller:
    """Runs a source's streams and census into a :class:`MemoryWal` as connector ``name``."""

    name: str
    clock: ManualClock
    wal: MemoryWal = field(default_factory=MemoryWal)
    census: MemoryCensus = field(init=False)
    service: SyncService = field(init=False)

    def __post_init__(self) -> None:
        self.service = SyncService(self.wal, self.clock)
        self.census = MemoryCensus(self.ingested)

    def ingested(self) -> list[tuple[str, str]]:
        """Every (table, row id) the connector wrote (the census's known ids)."""
        return [(e.table, e.row_id) for e in self.wal.read_entries(GW, 0)]

    def run(
        self, streams: list[Stream], census: CensusStream | None = None, **kw: Any
    ) -> RunReport:
        """One poll; ``report.census`` is the census stream's outcome."""
        self.clock.advance(1000)
        report = run_streams(
            [*streams, *([census] if census else [])],
            gw=GW,
            connector=self.name,
            append=lambda ds: self.service.append(GW, self.name, ds),
            store=self.wal,
            clock=self.clock,
            ensure_schema=lambda schema: ensure_columns(self.service, GW, schema),
            **kw,
        )
        if census is not None:
            report.census = census.outcome
        return report

    def rows(self, table: str) -> dict[str, dict[str, Any]]:
        """The live rows of ``table``."""
        return {k: s.values() for k, s in self.service.known_rows(GW, table).items() if s.live}

    def columns(self, table: str) -> list[str]:
        """The registered schema's columns of ``table``."""
        return list(self.wal.schemas(GW)[table].column_names)

    def differ(self) -> Callable[[], MemoryCensus]:
        """What a census stream opens."""
        return lambda: self.census
