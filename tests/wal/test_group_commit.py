"""Group commit: jobs share one transaction; a job that raises is undone alone."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import Connection

from lakesync_platform.wal.group_commit import GroupCommitter
from lakesync_platform.wal.store import WriteAheadLog


def _insert_job(gw: str, name: str, runs: Counter[str], *, fail: bool = False) -> object:
    def fn(conn: Connection) -> str:
        runs[name] += 1
        conn.exec_driver_sql(
            "INSERT INTO wal_flush_requests (request_id, gateway_id, requested_ms, status,"
            f" updated_ms) VALUES ('{gw}-{name}', '{gw}', 0, 'pending', 0)"
        )
        if fail:
            raise ValueError(f"job {name} fails after writing")
        return name

    return fn


def test_a_failing_job_is_undone_alone_and_the_rest_of_its_group_commits(
    wal: WriteAheadLog, gw: str
) -> None:
    committer = GroupCommitter(wal)
    runs: Counter[str] = Counter()
    release = threading.Event()
    holding = threading.Event()

    def blocker(conn: Connection) -> str:
        holding.set()
        release.wait(10)
        return "blocker"

    results: dict[str, object] = {}

    def submit(name: str, fn: object) -> None:
        try:
            results[name] = committer.run(gw, fn)  # type: ignore[arg-type]
        except Exception as exc:  # the failing job's own exception comes back to its caller
            results[name] = exc

    first = threading.Thread(target=submit, args=("blocker", blocker))
    first.start()
    assert holding.wait(10)
    # queued while the writer is busy: these three run as one group
    threads = []
    for n, (name, fail) in enumerate((("a", False), ("b", True), ("c", False)), start=1):
        th = threading.Thread(target=submit, args=(name, _insert_job(gw, name, runs, fail=fail)))
        th.start()
        threads.append(th)
        while len(committer._queue) < n:  # queued in this order, behind the blocker
            threading.Event().wait(0.005)
    release.set()
    for th in (first, *threads):
        th.join(10)
    committer.close()

    assert results["blocker"] == "blocker"
    assert results["a"] == "a" and results["c"] == "c"
    assert isinstance(results["b"], ValueError)
    with wal.read() as conn:
        stored = conn.exec_driver_sql(
            "SELECT request_id FROM wal_flush_requests WHERE gateway_id = "
            + ("?" if wal.dialect == "sqlite" else "%s")
            + " ORDER BY request_id",
            (gw,),
        ).scalars()
        assert list(stored) == [f"{gw}-a", f"{gw}-c"]
    # the job before the failing one ran again in the group's second transaction
    assert runs == Counter({"a": 2, "b": 1, "c": 1})


def test_a_job_that_fails_alone_writes_nothing(wal: WriteAheadLog, gw: str) -> None:
    committer = GroupCommitter(wal)
    runs: Counter[str] = Counter()
    with pytest.raises(ValueError, match="job x fails"):
        committer.run(gw, _insert_job(gw, "x", runs, fail=True))  # type: ignore[arg-type]
    assert committer.run(gw, _insert_job(gw, "y", runs)) == "y"  # type: ignore[arg-type]
    committer.close()
    with wal.read() as conn:
        ids = conn.exec_driver_sql(
            "SELECT request_id FROM wal_flush_requests WHERE gateway_id = '" + gw + "'"
        ).scalars()
    assert list(ids) == [f"{gw}-y"] and runs == Counter({"x": 1, "y": 1})


def test_the_observer_learns_the_size_of_every_committed_group(wal: WriteAheadLog, gw: str) -> None:
    sizes: list[int] = []
    committer = GroupCommitter(wal, on_commit=sizes.append)
    runs: Counter[str] = Counter()
    with pytest.raises(ValueError, match="job x fails"):
        committer.run(gw, _insert_job(gw, "x", runs, fail=True))  # type: ignore[arg-type]
    assert committer.run(gw, _insert_job(gw, "y", runs)) == "y"  # type: ignore[arg-type]
    committer.close()
    assert sizes == [1]  # the failed job's group committed nothing


def test_a_failing_observer_does_not_stop_the_writer(wal: WriteAheadLog, gw: str) -> None:
    def observer(size: int) -> None:
        raise RuntimeError("observer bug")

    committer = GroupCommitter(wal, on_commit=observer)
    runs: Counter[str] = Counter()
    assert committer.run(gw, _insert_job(gw, "a", runs)) == "a"  # type: ignore[arg-type]
    assert committer.run(gw, _insert_job(gw, "b", runs)) == "b"  # type: ignore[arg-type]
    committer.close()
    assert runs == Counter({"a": 1, "b": 1})
