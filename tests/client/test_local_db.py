"""LocalDB: statements, nested transactions, change notification, threads."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from lakesync_platform.client import LocalDB


@pytest.fixture
def db() -> LocalDB:
    db = LocalDB.memory()
    db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    return db


def test_exec_query_and_rowcount(db: LocalDB) -> None:
    assert db.exec("INSERT INTO t (v) VALUES (?)", ["a"]) == 1
    assert db.exec_many("INSERT INTO t (v) VALUES (?)", [["b"], ["c"]]) == 2
    assert db.query("SELECT v FROM t ORDER BY id") == [{"v": "a"}, {"v": "b"}, {"v": "c"}]
    assert db.query_tuples("SELECT count(*) FROM t") == [(3,)]
    assert db.exec("UPDATE t SET v = 'z'") == 3


def test_transaction_commits_and_rolls_back(db: LocalDB) -> None:
    with db.transaction():
        db.exec("INSERT INTO t (v) VALUES ('kept')")
    with pytest.raises(RuntimeError), db.transaction():
        db.exec("INSERT INTO t (v) VALUES ('lost')")
        raise RuntimeError("boom")
    assert [r["v"] for r in db.query("SELECT v FROM t")] == ["kept"]
    assert not db.in_transaction


def test_nested_transaction_is_a_savepoint(db: LocalDB) -> None:
    with db.transaction():
        db.exec("INSERT INTO t (v) VALUES ('outer')")
        with pytest.raises(ValueError), db.transaction():
            db.exec("INSERT INTO t (v) VALUES ('inner')")
            raise ValueError
        with db.transaction():
            db.exec("INSERT INTO t (v) VALUES ('inner2')")
    assert [r["v"] for r in db.query("SELECT v FROM t ORDER BY id")] == ["outer", "inner2"]


def test_listeners_hear_committed_changes_only(db: LocalDB) -> None:
    heard: list[frozenset[str]] = []
    remove = db.add_listener(heard.append)
    with db.transaction():
        db.mark_changed({"a"})
        with db.transaction():
            db.mark_changed({"b"})
        assert heard == []  # nothing before the outermost commit
    assert heard == [frozenset({"a", "b"})]
    with pytest.raises(KeyError), db.transaction():
        db.mark_changed({"c"})
        raise KeyError
    with db.transaction():
        with pytest.raises(KeyError), db.transaction():
            db.mark_changed({"d"})
            raise KeyError
        db.mark_changed({"e"})
    assert heard == [frozenset({"a", "b"}), frozenset({"e"})]
    db.mark_changed({"f"})  # outside a transaction: at once
    assert heard[-1] == frozenset({"f"})
    remove()
    db.mark_changed({"g"})
    assert heard[-1] == frozenset({"f"})


def test_failing_listener_does_not_break_commit(
    db: LocalDB, caplog: pytest.LogCaptureFixture
) -> None:
    def bad(_: frozenset[str]) -> None:
        raise RuntimeError("listener bug")

    heard: list[frozenset[str]] = []
    db.add_listener(bad)
    db.add_listener(heard.append)
    with db.transaction():
        db.exec("INSERT INTO t (v) VALUES ('x')")
        db.mark_changed({"t"})
    assert heard == [frozenset({"t"})]
    assert "listener" in caplog.text


def test_file_database_persists_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with LocalDB.open(path) as db:
        assert db.path == str(path)
        assert db.query_tuples("PRAGMA journal_mode") == [("wal",)]
        db.exec("CREATE TABLE t (v)")
        db.exec("INSERT INTO t VALUES (1)")
    with LocalDB.open(path) as db:
        assert db.query_tuples("SELECT v FROM t") == [(1,)]
    with pytest.raises(ValueError):
        LocalDB.open(path, synchronous="sometimes")


def test_close_is_idempotent_and_final(db: LocalDB) -> None:
    db.close()
    db.close()
    assert db.closed
    with pytest.raises(sqlite3.ProgrammingError), db.transaction():
        pass


def test_transactions_from_threads_do_not_interleave(db: LocalDB) -> None:
    def work(tag: str) -> None:
        for i in range(50):
            with db.transaction():
                db.exec("INSERT INTO t (v) VALUES (?)", [f"{tag}{i}"])
                db.exec("UPDATE t SET v = v WHERE id = last_insert_rowid()")

    threads = [threading.Thread(target=work, args=(c,)) for c in "abcd"]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert db.query_tuples("SELECT count(*) FROM t") == [(200,)]
