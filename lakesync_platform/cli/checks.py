"""What the commands check before they create or start anything.

A missing data directory, a missing WAL, an unknown gateway or a taken port is the caller's
slip, not a failure of the platform: the command stops with exit status 2 and one line saying
what is wrong and what to run — nothing is created on the way (:class:`NotReady`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from pathlib import Path

import click
from sqlalchemy.engine import make_url

__all__ = [
    "NotReady",
    "embedded_wal_file",
    "port_owner",
    "require_data_dir",
    "require_free_ports",
]

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


class NotReady(click.ClickException):
    """What the command needs is not there (or not free): exit status 2, one line."""

    exit_code = 2


def require_data_dir(data_dir: Path) -> None:
    """Stop unless ``data_dir`` exists (never create it: a typo must not grow a new one)."""
    if not data_dir.is_dir():
        data_dir = data_dir.resolve()
        raise NotReady(
            f"no data directory {data_dir}: create it by starting the gateway once "
            f"(lakesync gateway --data-dir {data_dir}), or pass the right --data-dir"
        )


def embedded_wal_file(wal_url: str) -> Path | None:
    """The SQLite file of a ``sqlite:///PATH`` WAL URL; ``None`` for a database server."""
    if not wal_url.startswith("sqlite"):
        return None
    database = make_url(wal_url).database
    return Path(database) if database and database != ":memory:" else None


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on ``port`` (any address), from ``/proc/net/tcp{,6}``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if (
                    len(fields) > 9
                    and fields[3] == _LISTEN
                    and int(fields[1].rsplit(":", 1)[1], 16) == port
                ):
                    inodes.add(fields[9])
    return inodes


def port_owner(port: int) -> str | None:
    """``pid N (command)`` of the process listening on ``port``, if this user can see it."""
    targets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not targets:
        return None
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            fd_dir = f"/proc/{pid}/fd"
            if any(os.readlink(f"{fd_dir}/{fd}") in targets for fd in os.listdir(fd_dir)):
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                command = " ".join(raw.decode(errors="replace").split("\0")).strip()
                if len(command) > 80:
                    command = command[:77] + "..."
                return f"pid {pid} ({command or '?'})"
    return None


def _taken(port: int, host: str) -> bool:
    """Whether binding ``host:port`` fails (``SO_REUSEADDR``, as servers bind: a closed
    connection lingering in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def require_free_ports(ports: Iterable[tuple[str, int]], host: str = "127.0.0.1") -> None:
    """Stop unless every ``(flag, port)`` can be bound on ``host``; name what holds a taken one."""
    problems = [
        f"port {port} is already in use by {port_owner(port) or 'another process'}; "
        f"stop it or choose another port with {flag}"
        for flag, port in ports
        if _taken(port, host)
    ]
    if problems:
        raise NotReady("\n".join(problems))
