"""The todo example runs as docs/client.md shows: two users converge through a gateway."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from lakesync_platform.client import GatewayConfig, create_client
from lakesync_platform.testing import DEMO_TODOS, GatewayProcess
from tests.helpers import ROOT, SECRET, token

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


class Shell:
    """The example's interactive shell as a subprocess: lines in, the screen collected."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), *args, "shell"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self._chunks: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read(1):
            self._chunks.append(chunk)

    @property
    def screen(self) -> str:
        """Everything the shell printed so far."""
        return "".join(self._chunks)

    def wait_for(self, text: str, timeout: float = 30) -> None:
        """Wait until ``text`` is on the screen."""
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            assert time.monotonic() < deadline, f"{text!r} not printed:\n{self.screen}"
            assert self.proc.poll() is None, f"the shell exited:\n{self.screen}"
            time.sleep(0.02)

    def type(self, line: str) -> None:
        """Type ``line`` and Enter."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> str:
        """Quit; the whole screen."""
        self.type("quit")
        assert self.proc.wait(timeout=30) == 0, self.screen
        return self.screen

    def release(self) -> None:
        """Kill the shell if it still runs and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def test_the_shell_prints_each_list_once_and_an_outage_once(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw", SECRET)
    gw = "demo_shell"
    shell = Shell(
        *("--user", "carol", "--url", gateway.url, "--gw", gw, "--token", token("carol", gw)),
        *("--db", str(tmp_path / "carol.db"), "--interval-ms", "100"),
    )
    try:
        shell.wait_for("gateway unreachable")
        shell.type("add Buy milk")
        shell.wait_for("Buy milk  (carol)\ncarol> ")
        with gateway.start():
            shell.wait_for("gateway reachable again")
            row_id = shell.screen.split("[ ] ")[1][:8]
            shell.type(f"done {row_id[:6]}")
            shell.wait_for(f"[x] {row_id}  Buy milk  (carol)\ncarol> ")
            screen = shell.close()
    finally:
        shell.release()
    # One line when the gateway went away, one when it came back, despite retries meanwhile.
    assert screen.count("gateway unreachable") == 1, screen
    assert screen.count("gateway reachable again") == 1, screen
    # Each state of the list is printed once, and the prompt never twice in a row.
    assert screen.count("  (nothing to do)") == 1, screen
    assert screen.count(f"[ ] {row_id}  Buy milk") == 1, screen
    assert screen.count(f"[x] {row_id}  Buy milk") == 1, screen
    assert "carol> carol> " not in screen and "carol> \ncarol> " not in screen, screen
