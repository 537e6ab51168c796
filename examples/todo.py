"""A shared todo list on the LakeSync Python client.

Two people run it side by side against one gateway and watch their lists converge — also after
working offline. Every command works without the gateway; ``sync`` / ``shell`` / ``watch`` talk
to it. See docs/client.md ("Try it: a shared todo list") for the full walk-through.

    python examples/todo.py --user alice add "Buy milk"
    python examples/todo.py --user alice sync
    python examples/todo.py --user bob shell          # interactive, syncs every second
    python examples/todo.py --user alice watch        # live view of the list

Options can also come from the environment: LAKESYNC_URL, LAKESYNC_GW, LAKESYNC_TOKEN.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import uuid
from typing import Any

from lakesync_platform.client import GatewayConfig, LakeSyncClient, TransportError, create_client

TODOS = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "author", "type": "string"},
        {"name": "created_ms", "type": "number"},
    ],
}


def open_client(args: argparse.Namespace, auto_sync_ms: int = 0) -> LakeSyncClient:
    """The user's client: one SQLite file per user, talking to the gateway."""
    return create_client(
        name=f"todo-{args.user}",
        schemas=[TODOS],
        client_id=args.user,
        path=args.db or f"todo-{args.user}.db",
        gateway=GatewayConfig(url=args.url, gateway_id=args.gw, token=args.token or None),
        auto_sync_ms=auto_sync_ms,
    )


def render(rows: list[dict[str, Any]]) -> str:
    """The list as text, open items first."""
    if not rows:
        return "  (nothing to do)"
    lines = []
    for row in rows:
        mark = "x" if row["done"] else " "
        lines.append(f"  [{mark}] {row['_rowId'][:8]}  {row['title']}  ({row['author']})")
    return "\n".join(lines)


LIST_SQL = "SELECT _rowId, title, done, author FROM todos ORDER BY done, created_ms, _rowId"


def find(client: LakeSyncClient, prefix: str) -> str:
    """The full row id of the todo whose id starts with ``prefix``."""
    ids = [r["_rowId"] for r in client.tracker.query("SELECT _rowId FROM todos")]
    matches = [i for i in ids if i.startswith(prefix)]
    if len(matches) != 1:
        raise SystemExit(f"no single todo matches {prefix!r}")
    return matches[0]


def run_command(client: LakeSyncClient, words: list[str]) -> None:
    """Execute one of add / done / undo / rm / list / sync / status."""
    cmd, rest = words[0], words[1:]
    if cmd == "add":
        client.tracker.insert(
            "todos",
            uuid.uuid4().hex,
            {
                "title": " ".join(rest),
                "done": False,
                "author": client.client_id,
                "created_ms": time.time_ns() // 1_000_000,
            },
        )
    elif cmd in ("done", "undo"):
        client.tracker.update("todos", find(client, rest[0]), {"done": cmd == "done"})
    elif cmd == "rename":
        client.tracker.update("todos", find(client, rest[0]), {"title": " ".join(rest[1:])})
    elif cmd == "rm":
        client.tracker.delete("todos", find(client, rest[0]))
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
    if cmd != "status":
        print(render(client.tracker.query(LIST_SQL)))


def shell(args: argparse.Namespace) -> None:
    """Interactive: type commands; the list re-prints whenever anyone changes it."""
    client = open_client(args, auto_sync_ms=args.interval_ms)
    client.coordinator.on_error(lambda e: print(f"\n  ! sync: {e}", file=sys.stderr))
    client.watch(LIST_SQL, [], lambda rows: print(f"\n{render(rows)}\n{args.user}> ", end=""))
    try:
        while True:
            try:
                line = input(f"{args.user}> ")
            except EOFError:
                break
            if line.strip() in ("quit", "exit"):
                break
            if line.strip():
                try:
                    run_command(client, shlex.split(line))
                except SystemExit as exc:
                    print(exc)
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
    parser.add_argument("--db", help="local SQLite file (default todo-<user>.db)")
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
