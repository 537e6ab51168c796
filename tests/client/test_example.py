"""The todo example runs as docs/client.md shows: two users converge through a gateway."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from lakesync_platform.client import GatewayConfig, create_client
from lakesync_platform.testing import DEMO_TODOS
from tests.helpers import ROOT, token

from .conftest import LiveGateway

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "todo.py"


def run_example(gateway: LiveGateway, gw: str, user: str, *args: str, cwd: Path = ROOT) -> str:
    """Run the example as ``user`` on gateway ``gw``; its stdout."""
    options = ["--user", user, "--url", gateway.url, "--gw", gw, "--token", token(user, gw)]
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *options, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=cwd,
    )
    return done.stdout


def test_two_users_share_a_todo_list(sqlite_gateway: LiveGateway, tmp_path: Path) -> None:
    def todo(user: str, *command: str) -> str:
        db = str(tmp_path / f"{user}.db")
        return run_example(sqlite_gateway, "demo_todo", user, "--db", db, *command)

    todo("alice", "add", "Buy milk")
    assert "Buy milk  (alice)" in todo("alice", "sync")
    assert "2 received" not in todo("bob", "add", "Walk the dog")
    listing = todo("bob", "sync")
    assert "[ ]" in listing and "Buy milk" in listing and "Walk the dog" in listing
    row_id = sqlite_gateway.service.known_rows("demo_todo", "todos")
    milk = next(k for k, s in row_id.items() if s.values()["title"] == "Buy milk")
    assert f"[x] {milk[:8]}  Buy milk" in todo("bob", "done", milk[:6])
    todo("bob", "sync")
    final = todo("alice", "sync")
    assert f"[x] {milk[:8]}  Buy milk" in final and "Walk the dog  (bob)" in final
    assert "queued: 0, dead letters: 0" in todo("alice", "status")


def test_example_writes_the_demo_table(sqlite_gateway: LiveGateway, tmp_path: Path) -> None:
    """On a gateway with the demo's schema registered (as ``lakesync dev`` registers it), the
    example's changes are accepted, and rows written by other demo clients list sensibly."""
    gw = "demo_schema"
    response = httpx.post(
        f"{sqlite_gateway.url}/v1/admin/schema/{gw}",
        json=DEMO_TODOS,
        headers={"Authorization": f"Bearer {token('admin', gw, 'admin')}"},
    )
    assert response.status_code == 200, response.text
    demo = create_client(
        name="demo-client",
        schemas=[DEMO_TODOS],
        client_id="client-1",
        path=str(tmp_path / "demo-client.db"),
        gateway=GatewayConfig(url=sqlite_gateway.url, gateway_id=gw, token=token("client-1", gw)),
    )
    with demo:
        demo.tracker.insert(
            "todos", "todo-7", {"title": "fix #7", "completed": True, "priority": 2}
        )
        demo.coordinator.sync_once()
        assert demo.coordinator.dead_letters() == []

    data_dir = tmp_path / "data"

    def todo(*command: str) -> str:
        return run_example(
            sqlite_gateway, gw, "alice", "--data-dir", str(data_dir), *command, cwd=tmp_path
        )

    todo("add", "Buy milk")
    listing = todo("sync")
    assert ", 1 sent" in listing
    assert "Buy milk  (alice)" in listing
    assert "[x] todo-7  fix #7\n" in listing + "\n" and "None" not in listing
    assert "queued: 0, dead letters: 0" in todo("status")
    rows = sqlite_gateway.rows(gw)
    milk = next(r for r in rows.values() if r.get("title") == "Buy milk")
    assert milk == {"title": "Buy milk", "completed": False, "tags": ["alice"]}
    # The local file lands in the data directory, not in the working directory.
    assert [p.name for p in data_dir.iterdir()] == ["todo-alice.lakesync.db"]
    assert not list(tmp_path.glob("todo-*"))
