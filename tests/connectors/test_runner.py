"""The runner: changes reach the WAL in chunks through the sync service's append, each
stream's state is saved only after the WAL committed what it covers, and a run that dies
mid-way, run again, loses and doubles nothing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from lakesync_platform.connectors.model import Change, Page
from lakesync_platform.connectors.records import json_value, row_change
from lakesync_platform.connectors.runner import run_streams
from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.wal import WalEntry
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import ManualClock
from lakesync_platform.wal.memory import MemoryWal

GW = "gw1"


@dataclass
class ListStream:
    """Rows ``source`` (id → row) in pages of ``size``, the state the last id of a page."""

    source: dict[int, dict[str, Any] | None]
    size: int = 3
    name: str = "items"
    table: str = "items"
    seen_states: list[Mapping[str, Any]] = field(default_factory=list)

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        self.seen_states.append(dict(state))
        ids = [i for i in sorted(self.source) if i > state.get("last", 0)]
        for start in range(0, len(ids), self.size):
            part = ids[start : start + self.size]
            yield Page([Change(str(i), self.source[i]) for i in part], {"last": part[-1]})


class Crash(Exception):
    pass


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def wal() -> MemoryWal:
    return MemoryWal()


@pytest.fixture
def service(wal: MemoryWal, clock: ManualClock) -> SyncService:
    return SyncService(wal, clock)


def run(stream: ListStream, service: SyncService, wal: MemoryWal, clock: ManualClock, **kw: Any):
    append = kw.pop("append", None) or (lambda ds: service.append(GW, "src", ds))
    return run_streams(
        [stream], gw=GW, connector="src", append=append, store=wal, clock=clock, **kw
    )


def rows(service: SyncService) -> dict[str, dict[str, Any]]:
    return {k: s.values() for k, s in service.known_rows(GW, "items").items() if s.live}


def test_a_run_appends_rows_in_chunks_and_saves_the_state(
    service: SyncService, wal: MemoryWal, clock: ManualClock
) -> None:
    stream = ListStream({i: {"v": i} for i in range(1, 11)})
    chunks: list[int] = []

    def append(ds: Sequence[RowDelta]) -> Sequence[WalEntry]:
        chunks.append(len(ds))
        assert {d.client_id for d in ds} == {"ingest:src"}
        return service.append(GW, "src", ds)

    report = run(stream, service, wal, clock, append=append, chunk_size=4)
    assert chunks == [4, 4, 2]
    assert report.records == 10 and report.deltas == {"INSERT": 10}
    assert report.streams[0].pages == 4
    assert report.streams[0].state_after == {"last": 10}
    assert wal.connector_state(GW, "src") == {"items": {"last": 10}}
    assert rows(service) == {str(i): {"v": i} for i in range(1, 11)}


def test_re_polling_unchanged_rows_appends_nothing_and_a_change_only_its_column(
    service: SyncService, wal: MemoryWal, clock: ManualClock
) -> None:
    source: dict[int, dict[str, Any] | None] = {1: {"a": 1, "b": "x"}, 2: {"a": 2, "b": "y"}}
    run(ListStream(source), service, wal, clock)
    wal.save_connector_state(GW, "src", "items", {})  # forget the cursor: re-poll everything
    clock.advance(10)
    assert run(ListStream(source), service, wal, clock).deltas == {}
    source[2] = {"a": 2, "b": "z"}
    source[1] = None
    wal.save_connector_state(GW, "src", "items", {})
    clock.advance(10)
    report = run(ListStream(source), service, wal, clock)
    assert report.deltas == {"DELETE": 1, "UPDATE": 1}
    last = wal.read_entries(GW, 0)[-2:]
    assert [(e.op, [(c.column, c.value) for c in e.columns]) for e in last] == [
        ("DELETE", []),
        ("UPDATE", [("b", "z")]),
    ]
    assert rows(service) == {"2": {"a": 2, "b": "z"}}


@pytest.mark.parametrize("die_after", [1, 2, 3])
def test_a_run_that_dies_mid_way_and_runs_again_loses_and_doubles_nothing(
    service: SyncService, wal: MemoryWal, clock: ManualClock, die_after: int
) -> None:
    source: dict[int, dict[str, Any] | None] = {i: {"v": i} for i in range(1, 21)}
    calls = 0

    def dying(ds: Sequence[RowDelta]) -> Sequence[WalEntry]:
        nonlocal calls
        calls += 1
        if calls > die_after:
            raise Crash
        return service.append(GW, "src", ds)

    with pytest.raises(Crash):
        run(ListStream(source, size=3), service, wal, clock, append=dying, chunk_size=4)
    saved = wal.connector_state(GW, "src").get("items", {})
    committed = {int(k) for k in rows(service)}
    # the saved cursor never runs ahead of what the WAL holds
    assert set(range(1, saved.get("last", 0) + 1)) <= committed
    clock.advance(10)
    stream = ListStream(source, size=3)
    run(stream, service, wal, clock, chunk_size=4)
    assert stream.seen_states == [saved]  # resumed from the saved state
    assert rows(service) == {str(i): {"v": i} for i in range(1, 21)}
    ids = [e.row_id for e in wal.read_entries(GW, 0)]
    assert sorted(ids, key=int) == [str(i) for i in range(1, 21)]  # each row exactly once


def test_after_commit_runs_only_once_the_page_is_committed(
    service: SyncService, wal: MemoryWal, clock: ManualClock
) -> None:
    events: list[str] = []

    @dataclass
    class Diff:
        name: str = "d"
        table: str = "items"

        def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
            yield Page([Change("1", {"v": 1})], {"snap": 1})
            yield Page([], {"snap": 2}, after_commit=lambda: events.append("replaced"))

    def append(ds: Sequence[RowDelta]) -> Sequence[WalEntry]:
        events.append(f"append {len(ds)}")
        return service.append(GW, "src", ds)

    run_streams([Diff()], gw=GW, connector="src", append=append, store=wal, clock=clock)
    assert events == ["append 1", "replaced"]
    assert wal.connector_state(GW, "src") == {"d": {"snap": 2}}


def test_record_clean_up_is_pure() -> None:
    import datetime as dt
    import decimal

    row = {
        "id": 7,
        "at": dt.datetime(2026, 1, 2, 3, 4, 5),
        "day": dt.date(2026, 1, 2),
        "amount": decimal.Decimal("12.50"),
        "n": decimal.Decimal("3"),
        "blob": b"\x01\x02",
        "nan": float("nan"),
        "tags": ("a", "b"),
    }
    change = row_change(row, "id")
    assert change.row_id == "7"
    assert change.row == {
        "at": "2026-01-02T03:04:05",
        "day": "2026-01-02",
        "amount": 12.5,
        "n": 3,
        "blob": "0102",
        "nan": None,
        "tags": ["a", "b"],
    }
    assert json_value({"k": decimal.Decimal("1.5")}) == {"k": 1.5}
