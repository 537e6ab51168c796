"""A shared todo list on the LakeSync Python client.

Two people run it side by side against one gateway and watch their lists converge — also after
working offline. Every command works without the gateway; ``sync`` / ``shell`` / ``watch`` talk
to it. See docs/client.md ("Try it: a shared todo list") for the full walk-through.

The table is the demo's ``todos`` (:data:`lakesync_platform.testing.DEMO_TODOS`, the table of
``defs/todos.yaml``), so the example runs against the gateway of ``lakesync dev`` too and lists
the demo clients' rows beside its own. The writer of a todo is the first entry of its ``tags``.
Each user's list is a SQLite file in the data directory: ``<data-dir>/todo-<user>.lakesync.db``.

    python examples/todo.py --user alice add "Buy milk"
    python examples/todo.py --user alice sync
    python examples/todo.py --user bob shell          # interactive, syncs every second
    python examples/todo.py --user alice watch        # live view of the list

Options can also come from the environment: LAKESYNC_URL, LAKESYNC_GW, LAKESYNC_TOKEN,
LAKESYNC_DATA_DIR.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakesync_platform.client import (
    GatewayConfig,
    LakeSyncClient,
    SyncReport,
    TransportError,
    create_client,
)
from lakesync_platform.settings import ENV_DATA_DIR, DataLayout
from lakesync_platform.testing import DEMO_TODOS

TABLE = DEMO_TODOS["table"]


def db_path(args: argparse.Namespace) -> Path:
    """The user's SQLite file: ``--db``, else ``<data-dir>/todo-<user>.lakesync.db``."""
    if args.db:
        return Path(args.db)
    root = DataLayout.at(args.data_dir).root
    root.mkdir(parents=True, exist_ok=True)
    return root / f"todo-{args.user}.lakesync.db"


def open_client(args: argparse.Namespace, auto_sync_ms: int = 0) -> LakeSyncClient:
    """The user's client: one SQLite file per user, talking to the gateway."""
    return create_client(
        name=f"todo-{args.user}",
        schemas=[DEMO_TODOS],
        client_id=args.user,
        path=str(db_path(args)),
        gateway=GatewayConfig(url=args.url, gateway_id=args.gw, token=args.token or None),
        auto_sync_ms=auto_sync_ms,
    )


def render(rows: list[dict[str, Any]]) -> str:
    """The list as text, open items first; the writer in parentheses when the row names one."""
    if not rows:
        return "  (nothing to do)"
    lines = []
    for row in rows:
        mark = "x" if row["completed"] else " "
        writer = f"  ({row['writer']})" if row["writer"] else ""
        title = row["title"] if row["title"] is not None else "(untitled)"
        lines.append(f"  [{mark}] {row['_rowId'][:8]}  {title}{writer}")
    return "\n".join(lines)


LIST_SQL = (
    "SELECT _rowId, title, completed, json_extract(tags, '$[0]') AS writer FROM todos"
    " ORDER BY coalesce(completed, 0), title, _rowId"
)


def find(client: LakeSyncClient, prefix: str) -> str:
    """The full row id of the todo whose id starts with ``prefix``."""
    ids = [r["_rowId"] for r in client.tracker.query(f"SELECT _rowId FROM {TABLE}")]
    matches = [i for i in ids if i.startswith(prefix)]
    if len(matches) != 1:
        raise SystemExit(f"no single todo matches {prefix!r}")
    return matches[0]


def run_command(client: LakeSyncClient, words: list[str], *, show_list: bool = True) -> None:
    """Execute one of add / done / undo / rm / list / sync / status; print the list afterwards
    (``show_list``; the shell prints it itself whenever it changes)."""
    cmd, rest = words[0], words[1:]
    if cmd == "add":
        client.tracker.insert(
            TABLE,
            uuid.uuid4().hex,
            {"title": " ".join(rest), "completed": False, "tags": [client.client_id]},
        )
    elif cmd in ("done", "undo"):
        client.tracker.update(TABLE, find(client, rest[0]), {"completed": cmd == "done"})
    elif cmd == "rename":
        client.tracker.update(TABLE, find(client, rest[0]), {"title": " ".join(rest[1:])})
    elif cmd == "rm":
        client.tracker.delete(TABLE, find(client, rest[0]))
    elif cmd == "sync":
        try:
            report = client.coordinator.sync_once()
            print(f"synced: {report.pulled} received, {report.pushed} sent")
        except TransportError as exc:
            print(f"offline ({exc.message}); {client.coordinator.queue_depth()} change(s) queued")
    elif cmd == "status":
        print(
            f"queued: {client.coordinator.queue_depth()}, "
            f"dead letters: {len(client.coordinator.dead_letters())}, "
            f"last sync: {client.coordinator.last_sync_time}"
        )
    elif cmd != "list":
        raise SystemExit(f"unknown command {cmd!r}")
    if cmd == "list" or (show_list and cmd != "status"):
        print(render(client.tracker.query(LIST_SQL)))


class Console:
    """The shell's screen: the prompt shown once, the list printed once per change, and text
    from the sync thread printed above the prompt (which is then shown again)."""

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self._lock = threading.Lock()
        self._at_prompt = False
        self._last_list: str | None = None

    def read(self) -> str:
        """The next command line (raises ``EOFError`` at the end of input)."""
        with self._lock:
            self._at_prompt = True
            sys.stdout.write(self.prompt)
            sys.stdout.flush()
        try:
            return input()
        finally:
            with self._lock:
                self._at_prompt = False

    def say(self, text: str) -> None:
        """Print ``text``; above the prompt when the user is at it."""
        with self._lock:
            if self._at_prompt:
                sys.stdout.write(f"\n{text}\n{self.prompt}")
            else:
                sys.stdout.write(f"{text}\n")
            sys.stdout.flush()

    def show_list(self, rows: list[dict[str, Any]]) -> None:
        """Print the list unless it is the one printed last."""
        text = render(rows)
        if text != self._last_list:
            self._last_list = text
            self.say(text)


class GatewayStatus:
    """Say once that the gateway cannot be reached and once that it is back; in between the
    auto-sync retries quietly, its interval doubling up to ``MAX_BACKOFF`` times the normal one
    (a command retries at once)."""

    MAX_BACKOFF = 8

    def __init__(
        self, client: LakeSyncClient, say: Callable[[str], None], interval_ms: int
    ) -> None:
        self.coordinator = client.coordinator
        self.say = say
        self.interval_ms = interval_ms
        self.failing: str | None = None

    def failed(self, error: BaseException) -> None:
        """A sync cycle failed: report it if it is news, and back off."""
        message = getattr(error, "message", None) or str(error)
        if message != self.failing:
            self.say(f"  ! gateway unreachable ({message}); changes stay queued, retrying quietly")
            self.failing = message
        self.coordinator.auto_sync_ms = min(
            self.coordinator.auto_sync_ms * 2, self.interval_ms * self.MAX_BACKOFF
        )

    def synced(self, _report: SyncReport) -> None:
        """A sync cycle succeeded: report the way back, and sync at the normal pace again."""
        if self.failing is not None:
            self.failing = None
            self.say(f"  ✓ gateway reachable again; {self.coordinator.queue_depth()} queued")
        self.coordinator.auto_sync_ms = self.interval_ms


def shell(args: argparse.Namespace) -> None:
    """Interactive: type commands; the list re-prints whenever anyone changes it."""
    console = Console(f"{args.user}> ")
    client = open_client(args)
    status = GatewayStatus(client, console.say, args.interval_ms)
    client.coordinator.on_error(status.failed)
    client.coordinator.on_sync_complete(status.synced)
    client.watch(LIST_SQL, [], console.show_list)
    client.coordinator.start_auto_sync(args.interval_ms)
    try:
        while True:
            try:
                line = console.read()
            except EOFError:
                break
            if line.strip() in ("quit", "exit"):
                break
            if line.strip():
                try:
                    run_command(client, shlex.split(line), show_list=False)
                except SystemExit as exc:
                    console.say(str(exc))
                client.coordinator.request_sync()
    finally:
        client.close()


def watch(args: argparse.Namespace) -> None:
    """Print the list every time it changes, until Ctrl-C."""
    client = open_client(args, auto_sync_ms=args.interval_ms)
    client.watch(LIST_SQL, [], lambda rows: print(f"--- {time.strftime('%X')}\n{render(rows)}"))
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--user", required=True, help="your client id (the token's sub)")
    parser.add_argument("--url", default=os.environ.get("LAKESYNC_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--gw", default=os.environ.get("LAKESYNC_GW", "demo"))
    parser.add_argument("--token", default=os.environ.get("LAKESYNC_TOKEN"))
    parser.add_argument(
        "--data-dir",
        default=os.environ.get(ENV_DATA_DIR),
        help="data directory holding the local SQLite files (default ./data)",
    )
    parser.add_argument(
        "--db", help="local SQLite file (default <data-dir>/todo-<user>.lakesync.db)"
    )
    parser.add_argument("--interval-ms", type=int, default=1000, help="auto-sync interval")
    parser.add_argument(
        "command",
        nargs="+",
        help="add TEXT | done ID | undo ID | rename ID TEXT"
        " | rm ID | list | sync | status | shell | watch",
    )
    args = parser.parse_args(argv)
    if args.command[0] == "shell":
        shell(args)
    elif args.command[0] == "watch":
        watch(args)
    else:
        with open_client(args) as client:
            run_command(client, args.command)


if __name__ == "__main__":
    main()
