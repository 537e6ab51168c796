"""The todo example runs as docs/client.md shows: two users converge through a gateway."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, token

from .conftest import LiveGateway

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "todo.py"


def test_two_users_share_a_todo_list(sqlite_gateway: LiveGateway, tmp_path: Path) -> None:
    def todo(user: str, *command: str) -> str:
        args = [
            "--user",
            user,
            "--url",
            sqlite_gateway.url,
            "--gw",
            "demo_todo",
            "--token",
            token(user, "demo_todo"),
            "--db",
            str(tmp_path / f"{user}.db"),
        ]
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), *args, *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

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
