"""The lake's lock between real processes: a holder in another process, on a file or Postgres."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from lakesync_platform.core.errors import FlushError
from lakesync_platform.pipeline.lock import (
    FileLakeLock,
    LakeLock,
    PostgresLakeLock,
    lake_lock,
)
from lakesync_platform.spark.session import SparkSettings

from .lock_holder import Holder, Waiting


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def kind(request: pytest.FixtureRequest) -> str:
    """Which lock: a file lock or a Postgres advisory lock."""
    return str(request.param)


@pytest.fixture
def target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the lock lives: a lock file, or a fresh Postgres database."""
    if kind == "file":
        return str(tmp_path / "catalog.db.lock")
    return str(request.getfixturevalue("postgres_url"))


def make_lock(kind: str, target: str, timeout_s: float) -> LakeLock:
    """The lock of ``kind`` at ``target`` with a timeout."""
    if kind == "file":
        return FileLakeLock(Path(target), timeout_s)
    return PostgresLakeLock(target, timeout_s)


def test_a_stage_waits_for_the_holder_and_says_for_whom(
    kind: str, target: str, holders: list[Holder], waiting: Waiting
) -> None:
    holder = Holder(kind, target, "flush", "demo")
    holders.append(holder)
    order: list[str] = []

    def stage() -> None:
        with make_lock(kind, target, 30).hold("state", "demo"):
            order.append("state ran")

    thread = threading.Thread(target=stage)
    thread.start()
    assert waiting.seen.wait(15)
    assert waiting.messages == [f"waiting for flush of demo held by pid {holder.pid} (up to 30 s)"]
    assert order == []
    holder.release()
    thread.join(15)
    assert order == ["state ran"]


def test_a_stage_gives_up_after_its_timeout_having_touched_nothing(
    kind: str, target: str, holders: list[Holder], waiting: Waiting
) -> None:
    holder = Holder(kind, target, "materialise", "demo")
    holders.append(holder)
    with pytest.raises(FlushError) as caught, make_lock(kind, target, 0.3).hold("flush", "demo"):
        pytest.fail("the lock was taken twice")
    assert caught.value.code == "FLUSH_ERROR"
    assert (
        f"flush of 'demo' gave up after waiting 0.3 s for materialise of demo held by pid "
        f"{holder.pid}" in caught.value.message
    )
    assert "LAKESYNC_LOCK_TIMEOUT_SECONDS" in caught.value.message


def test_a_killed_holder_leaves_the_lock_free(
    kind: str, target: str, holders: list[Holder]
) -> None:
    holder = Holder(kind, target, "flush", "demo")
    holders.append(holder)
    os.kill(holder.pid, signal.SIGKILL)
    holder.proc.wait()
    with make_lock(kind, target, 15).hold("flush", "demo"):
        pass


def test_which_stages_share_a_lock(kind: str, target: str, holders: list[Holder]) -> None:
    """A SQLite catalog takes one writer: one lock for every gateway. On Postgres only the
    stages of one gateway wait for each other."""
    holders.append(Holder(kind, target, "flush", "demo"))
    other = make_lock(kind, target, 0).hold("flush", "other")
    if kind == "file":
        with pytest.raises(FlushError), other:
            pass
    else:
        with other:
            pass


def test_the_lock_lives_where_the_catalog_lives(tmp_path: Path) -> None:
    embedded = lake_lock(SparkSettings(data_dir=tmp_path), 5)
    assert isinstance(embedded, FileLakeLock)
    assert embedded.path == (tmp_path / "catalog.db.lock").resolve()
    assert embedded.holder_path == (tmp_path / "catalog.db.holder").resolve()
    elsewhere = lake_lock(
        SparkSettings(data_dir=tmp_path, catalog_uri=f"jdbc:sqlite:{tmp_path}/x/lake.db"), 5
    )
    assert isinstance(elsewhere, FileLakeLock) and elsewhere.path == tmp_path / "x/lake.db.lock"
    server = lake_lock(
        SparkSettings(
            data_dir=tmp_path,
            catalog_uri="jdbc:postgresql://127.0.0.1:5432/lake",
            catalog_user="u",
        ),
        5,
    )
    assert isinstance(server, PostgresLakeLock)
    assert server.url == "postgresql+psycopg://u@127.0.0.1:5432/lake"
    other = lake_lock(
        SparkSettings(data_dir=tmp_path, catalog_uri="jdbc:mysql://127.0.0.1/lake"), 5
    )
    assert isinstance(other, FileLakeLock) and other.path == tmp_path.resolve() / "lake.lock"
