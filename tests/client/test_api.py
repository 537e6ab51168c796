"""The public surface: exported names, docstrings, offline clients, small helpers."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest

import lakesync_platform.client as client_pkg
from lakesync_platform.client import (
    Checkpoint,
    OfflineTransport,
    PullResponse,
    PushAck,
    Transport,
    TransportError,
    create_client,
    system_clock_ms,
)
from lakesync_platform.client._watch import tables_in
from lakesync_platform.client.testing import FlakyTransport
from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.errors import ValidationError
from lakesync_platform.testing import ManualClock

from .conftest import TODOS, ClientFactory


def test_exported_members_are_documented() -> None:
    assert sorted(client_pkg.__all__) == client_pkg.__all__
    for name in client_pkg.__all__:
        member = getattr(client_pkg, name)
        if inspect.isclass(member) or inspect.isfunction(member):
            assert member.__module__.startswith("lakesync_platform.client"), name
            assert inspect.getdoc(member), f"{name} has no docstring"
            for attr, value in vars(member).items():
                if not attr.startswith("_") and inspect.isfunction(value):
                    assert inspect.getdoc(value), f"{name}.{attr} has no docstring"


def test_client_package_imports_no_server_code() -> None:
    code = (
        "import sys, lakesync_platform.client, lakesync_platform.client.testing;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('gateway', 'litestar', 'dagster',"
        " 'uvicorn', 'sqlalchemy')]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_transports_satisfy_the_protocol(make_client: ClientFactory) -> None:
    c = make_client("alice", flaky=True)
    assert isinstance(c.transport, Transport)
    assert isinstance(OfflineTransport(), Transport)
    assert isinstance(FlakyTransport(OfflineTransport()), Transport)


def test_a_client_without_gateway_works_offline(clock: ManualClock) -> None:
    with create_client(
        name="solo", schemas=[TODOS], backend="memory", auto_sync_ms=0, clock=clock
    ) as c:
        assert c.client_id.startswith("client-")
        assert isinstance(c.transport, OfflineTransport)
        c.tracker.insert("todos", "t1", {"title": "local only"})
        with pytest.raises(TransportError, match="no gateway"):
            c.sync_once()
        assert c.coordinator.queue_depth() == 1
        assert c.transport.checkpoint() is None
    c.close()  # idempotent


def test_default_file_path_and_bad_backend(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with create_client(name="here", auto_sync_ms=0) as c:
        assert c.db.path == "here.lakesync.db"
    assert (tmp_path / "here.lakesync.db").exists()
    with pytest.raises(ValueError, match="backend"):
        create_client(name="x", backend="cloud", auto_sync_ms=0)  # type: ignore[arg-type]


def test_schema_json_errors_surface_at_create(tmp_path: Any) -> None:
    with pytest.raises(Exception, match="Invalid column type"):
        create_client(
            name="bad",
            path=tmp_path / "b.db",
            auto_sync_ms=0,
            schemas=[{"table": "t", "columns": [{"name": "x", "type": "text"}]}],
        )


def test_tables_in() -> None:
    assert tables_in('SELECT * FROM todos t JOIN "users" u ON u.id = t.owner') == {"todos", "users"}
    assert tables_in("select count(*) from notes where x in (select y from tags)") == {
        "notes",
        "tags",
    }
    assert tables_in("SELECT 1") == frozenset()


def test_system_clock_and_manual_clock() -> None:
    import time

    assert abs(system_clock_ms() - time.time() * 1000) < 1000
    clock = ManualClock(5)
    assert clock() == 5 and clock.advance(10) == 15 and clock() == 15


class _CorruptCheckpoint:
    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        return PushAck(1, len(deltas))

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        return PullResponse([], 7, False)

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        raise ValidationError("Malformed protobuf")

    def close(self) -> None:
        pass


def test_a_broken_checkpoint_is_reported_then_skipped(make_client: ClientFactory) -> None:
    c = make_client("alice", transport=_CorruptCheckpoint())
    errors: list[BaseException] = []
    c.coordinator.on_error(errors.append)
    c.sync_once()
    assert isinstance(errors[0], ValidationError)
    assert c.coordinator.cursor == 7
    c.sync_once()
    assert len(errors) == 1  # not retried on every cycle
