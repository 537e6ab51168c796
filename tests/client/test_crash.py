"""A client process killed with SIGKILL in the middle of a push loses and doubles nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lakesync_platform.client import InProcessTransport, create_client
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import GW, TODOS, local_rows

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from lakesync_platform.client import InProcessTransport, create_client
    from lakesync_platform.sync.service import SyncService
    from lakesync_platform.wal.store import WriteAheadLog

    wal_path, client_path, when = sys.argv[1], sys.argv[2], sys.argv[3]
    wal = WriteAheadLog.open(f"sqlite:///{wal_path}")
    service = SyncService(wal, lambda: time.time_ns() // 10**6)

    class DieMidPush(InProcessTransport):
        def push(self, client_id, deltas, last_seen_hlc):
            if when == "before-commit":
                os.kill(os.getpid(), signal.SIGKILL)
            ack = super().push(client_id, deltas, last_seen_hlc)
            os.kill(os.getpid(), signal.SIGKILL)  # committed on the gateway, never acknowledged
            return ack

    schema = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
    client = create_client(name="c", schemas=[schema], client_id="crashy", path=client_path,
                           transport=DieMidPush(service, "GATEWAY"), auto_sync_ms=0)
    for i in range(20):
        client.tracker.insert("todos", f"t{i:02}", {"title": f"row {i}"})
    client.tracker.update("todos", "t00", {"title": "updated"})
    client.tracker.delete("todos", "t01")
    client.coordinator.push()
    print("unreachable")
    """
).replace("GATEWAY", GW)


@pytest.mark.parametrize("when", ["before-commit", "after-commit"])
def test_sigkill_mid_push_keeps_the_outbox_and_resends_once(tmp_path: Path, when: str) -> None:
    wal_path, client_path = tmp_path / "wal.db", tmp_path / "client.db"
    WriteAheadLog.open(f"sqlite:///{wal_path}").close()  # create the schema first
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(wal_path), str(client_path), when],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert b"unreachable" not in proc.stdout

    wal = WriteAheadLog.open(f"sqlite:///{wal_path}")
    try:
        service = SyncService(wal, lambda: time.time_ns() // 10**6)
        committed = {e.delta_id for e in wal.read_entries(GW, 0)}
        assert len(committed) == (0 if when == "before-commit" else 22)
        client = create_client(
            name="c",
            schemas=[TODOS],
            client_id="crashy",
            path=client_path,
            transport=InProcessTransport(service, GW),
            auto_sync_ms=0,
        )
        with client:
            pending = client.coordinator.pending()
            assert len(pending) == 22  # nothing lost; 'sending' entries are pending again
            assert {e.status for e in pending} == {"pending"}
            if committed:
                assert {e.delta.delta_id for e in pending} == committed  # same ids, not re-stamped
            assert client.coordinator.push() == 22
            assert client.coordinator.queue_depth() == 0
            entries = wal.read_entries(GW, 0)
            ids = [e.delta_id for e in entries]
            assert len(ids) == len(set(ids)) == 22  # each delta logged exactly once
            client.coordinator.pull()
            rows = local_rows(client)
        assert len(rows) == 19 and rows["t00"] == {"title": "updated"} and "t01" not in rows
        server = {k: s.values() for k, s in service.known_rows(GW, "todos").items() if s.live}
        assert server == rows
    finally:
        wal.close()
