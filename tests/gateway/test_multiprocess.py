"""Several gateway processes on ONE Postgres WAL (the scale-out topology, ARCHITECTURE.md §4, §6).

Appends are serialised per gateway id (a row lock on ``wal_gateways``), so commit order equals
cursor order: a reader that was handed cursor ``C`` never misses an entry that commits later
with a cursor ``<= C``, whichever process it pulls from and whichever process took the write.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from tests.gateway.test_e2e import (
    Reader,
    RowKey,
    Writer,
    check_log,
    merge_all,
    push_copies_together,
    run_load,
    wal_snapshots,
)
from tests.helpers import SECRET

pytestmark = pytest.mark.postgres

PROCESSES = 3
WRITERS = 6
LOAD_SECONDS = 4.0


@pytest.fixture(scope="module")
def gateways(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str
) -> Iterator[list[GatewayProcess]]:
    """Three gateway processes on one Postgres WAL, started at the same time (they migrate the
    same schema concurrently). Shared by the tests here; each test uses its own gateway id."""
    root = tmp_path_factory.mktemp("multiprocess")
    procs = [GatewayProcess(root / f"gw{i}", SECRET, wal_url=pg_url) for i in range(PROCESSES)]
    errors: list[BaseException] = []

    def start(p: GatewayProcess) -> None:
        try:
            p.start(timeout=60)
        except BaseException as exc:  # re-raised below, after every process was started
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(p,)) for p in procs]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(90)
        if errors:
            raise errors[0]
        yield procs
    finally:
        for p in procs:
            p.stop()


def test_readers_on_every_process_converge_with_writers_spread_over_all(
    gateways: list[GatewayProcess], pg_url: str, gw: str
) -> None:
    writers = [
        Writer(gateways[i % PROCESSES].url, gw, f"writer{i}", seed=2000 + i) for i in range(WRITERS)
    ]
    readers = [Reader(p.url, gw, f"reader{i}", limit=50) for i, p in enumerate(gateways)]
    try:
        run_load(writers, readers, LOAD_SECONDS, reader_delay=0.3)
    finally:
        for c in (*writers, *readers):
            c.close()

    assert [e for c in (*writers, *readers) for e in c.errors] == []
    records = [r for w in writers for r in w.records]
    failed = [(r.status, r.error) for r in records if not r.acked]
    assert failed == [], f"{len(failed)} pushes failed: {failed[:3]}"
    assert len(records) >= WRITERS * 5, f"too little load: {len(records)} pushes"

    wal = WriteAheadLog.open(pg_url)
    try:
        report = check_log(wal, gw, records)
        assert set(report.by_id) == report.announced
        state = wal_snapshots(wal, gw)
    finally:
        wal.close()
    assert merge_all(d for r in records for d in r.deltas) == state
    for reader in readers:
        assert len(reader.pages) > 5, f"{reader.client_id} barely paged"
        assert reader.rows == state, f"{reader.client_id} diverged from the WAL"


def test_a_pull_cursor_never_passes_an_entry_that_commits_later(
    gateways: list[GatewayProcess], pg_url: str, gw: str
) -> None:
    """Only inserts of brand-new rows: each row has exactly one entry and its position is that
    entry's cursor, so each page must deliver exactly the rows whose cursor lies in
    ``(since, serverHlc]`` — a row committed later at a cursor the reader already passed would
    be missing from its page and never delivered again."""
    writers = [
        Writer(gateways[i % PROCESSES].url, gw, f"writer{i}", seed=3000 + i, workload="fresh")
        for i in range(WRITERS)
    ]
    readers = [Reader(p.url, gw, f"reader{i}", limit=50) for i, p in enumerate(gateways)]
    observations: list[tuple[int, int]] = []
    watcher_errors: list[str] = []
    done = threading.Event()
    engine = create_engine(pg_url, pool_size=1)

    def watch() -> None:
        """Read (count, max cursor) of the log in one snapshot, over and over: with gap-free
        cursors and commit order = cursor order they are always equal."""
        try:
            with engine.connect() as conn:
                while not done.is_set():
                    row = conn.execute(
                        text(
                            "SELECT count(*), coalesce(max(cursor), 0) FROM wal_entries "
                            "WHERE gateway_id = :gw"
                        ),
                        {"gw": gw},
                    ).one()
                    conn.commit()
                    observations.append((int(row[0]), int(row[1])))
        except Exception as exc:  # recorded and asserted on below
            watcher_errors.append(repr(exc))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run_load(writers, readers, LOAD_SECONDS, reader_delay=0.0)
    finally:
        done.set()
        watcher.join(30)
        engine.dispose()
        for c in (*writers, *readers):
            c.close()

    assert [e for c in (*writers, *readers) for e in c.errors] == [] and watcher_errors == []
    records = [r for w in writers for r in w.records]
    failed = [(r.status, r.error) for r in records if not r.acked]
    assert failed == [], f"{len(failed)} pushes failed: {failed[:3]}"

    wal = WriteAheadLog.open(pg_url)
    try:
        report = check_log(wal, gw, records)
        state = wal_snapshots(wal, gw)
    finally:
        wal.close()
    pushed = [d for r in records for d in r.deltas]
    assert len(report.entries) == len(pushed) == len(state)
    cursor_of: dict[RowKey, int] = {(e.table, e.row_id): e.cursor for e in report.entries}
    assert sorted(cursor_of.values()) == list(range(1, len(pushed) + 1)), "cursor gaps"

    # The watcher saw the log grow without holes: never cursor n+1 without n.
    assert len(observations) > 20
    holes = [(n, top) for n, top in observations if n != top]
    assert holes == [], f"entries visible with a smaller cursor still missing: {holes[:5]}"
    assert observations == sorted(observations)

    for reader in readers:
        assert len(reader.pages) > 5, f"{reader.client_id} barely paged"
        seen: set[RowKey] = set()
        for page in reader.pages:
            expected = {k for k, c in cursor_of.items() if page.since < c <= page.server}
            got = set(page.keys)
            assert got == expected, (
                f"{reader.client_id}: page ({page.since}, {page.server}] missed "
                f"{sorted(expected - got)[:5]} / sent extra {sorted(got - expected)[:5]}"
            )
            assert not got & seen, f"{reader.client_id}: a row delivered twice"
            seen |= got
        assert seen == set(cursor_of)
        assert reader.rows == state
    # Readers ran while the writers did: some pages ended at a cursor later pushes went past.
    in_flight = [p for r in readers for p in r.pages if 0 < p.server < len(pushed) and p.keys]
    assert len(in_flight) > 5


def test_one_batch_pushed_through_every_process_at_once_is_appended_once(
    gateways: list[GatewayProcess], pg_url: str, gw: str
) -> None:
    """A retry racing the first attempt on another process: one copy appends, the rest are
    pure duplicates (the deltaId check runs under the gateway lock, across processes)."""
    copies = [
        Writer(p.url, gw, "retrier", seed=6000, workload="own", max_batch=20) for p in gateways
    ]
    rounds = 15
    records = push_copies_together(copies, rounds)
    assert [(r.status, r.error) for r in records if not r.acked] == []
    for i in range(rounds):
        answers = [w.records[i] for w in copies]
        appended = [a.body["deltas"] for a in answers if a.body and a.body["deltas"]]
        assert len(appended) == 1 and len(appended[0]) == len(answers[0].deltas), answers
    wal = WriteAheadLog.open(pg_url)
    try:
        report = check_log(wal, gw, records)
    finally:
        wal.close()
    assert set(report.by_id) == report.announced == {d.delta_id for r in records for d in r.deltas}


def test_a_push_answer_never_moves_the_cursor_past_rows_the_client_did_not_pull(
    gateways: list[GatewayProcess], gw: str
) -> None:
    """The TS client sets its cursor to a push's ``serverHlc`` (ARCHITECTURE.md §4), so that
    must never be past what it received — also when its pulls land on different processes
    and it starts over from 0 (local data cleared, same ``clientId``)."""
    a, b = gateways[0], gateways[1]
    writer = Writer(a.url, gw, "writer", seed=7000, workload="fresh")
    phone_a = Reader(a.url, gw, "phone", limit=10)
    phone_b = Reader(b.url, gw, "phone", limit=10)
    phone = Writer(b.url, gw, "phone", seed=7001, workload="fresh", max_batch=1)
    try:
        assert writer.push([writer.new_row() for _ in range(30)]).acked
        assert phone_a.pull().server == 10  # process A remembers "phone pulled from 0"
        phone_b.cursor = 10
        phone_b.pull()
        phone_b.pull()  # process B records "phone pulled from 20" in the WAL
        phone_a.cursor = 0  # the phone starts over (cleared its local data)
        received = phone_a.pull().server  # rows 1..10; A's cache says 0 is already recorded
        answer = phone.push(phone.batch())
        assert answer.acked and answer.body is not None
        assert int(answer.body["serverHlc"]) <= received, (
            f"push answered serverHlc={answer.body['serverHlc']}; the client only has up to "
            f"{received}: rows in between would never reach a TS client"
        )
    finally:
        for c in (writer, phone_a, phone_b, phone):
            c.close()
