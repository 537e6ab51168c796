"""End every process of a set of sessions, within a deadline.

``lakesync dev`` starts each child in a session of its own (``start_new_session``). Everything
the child starts in turn — uvicorn's workers, Dagster's webserver, daemon, code server and its
gRPC server, the run workers and their Spark JVMs — stays in that session even when its parent
dies first and it is re-parented (none of them calls ``setsid``; PySpark's worker daemon moves
to a process group of its own, which is why sessions, not process groups, are followed). So the
session is the one handle that finds every descendant, orphans included.

Membership is read from ``/proc/<pid>/stat`` (Linux, as :mod:`.checks` reads ``/proc`` for port
owners): psutil, the portable choice, does not report the session id, and the platform's
supervisor runs on Linux only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection
from pathlib import Path

__all__ = ["end_sessions", "session_members", "signal_sessions"]

_POLL_S = 0.05


def _stat_fields(pid: str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, session…)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def session_members(sessions: Collection[int]) -> list[int]:
    """Pids of the live processes (zombies are gone: they hold nothing but a table entry) whose
    session id is one of ``sessions``."""
    members = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            fields = _stat_fields(pid)
            if fields is not None and fields[0] != "Z" and int(fields[3]) in sessions:
                members.append(int(pid))
    return members


def signal_sessions(sessions: Collection[int], sig: signal.Signals) -> None:
    """Send ``sig`` to every live member of ``sessions``."""
    for pid in session_members(sessions):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_empty(sessions: Collection[int], deadline: float) -> bool:
    while session_members(sessions):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def end_sessions(sessions: Collection[int], grace_s: float, kill_wait_s: float = 1.0) -> list[int]:
    """SIGTERM every member of ``sessions``, SIGKILL what is left after ``grace_s`` seconds, and
    wait up to ``kill_wait_s`` for those to go; return the pids that needed SIGKILL."""
    signal_sessions(sessions, signal.SIGTERM)
    if _wait_empty(sessions, time.monotonic() + grace_s):
        return []
    killed = session_members(sessions)
    signal_sessions(sessions, signal.SIGKILL)
    _wait_empty(sessions, time.monotonic() + kill_wait_s)
    return killed
