"""A process that holds the lake's lock until told to let go, and a watcher of the lock's
"waiting for …" warnings: the other side of the lock in tests."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

__all__ = ["Holder", "Waiting"]

_HOLDER = """
import sys
from pathlib import Path
from lakesync_platform.pipeline.lock import FileLakeLock, PostgresLakeLock
kind, target, stage, gw = sys.argv[1:5]
lock = FileLakeLock(Path(target), 0) if kind == "file" else PostgresLakeLock(target, 0)
with lock.hold(stage, gw):
    print("held", flush=True)
    sys.stdin.readline()
"""


class Holder:
    """A process holding the lock for ``stage`` of ``gw`` until told to let go."""

    def __init__(self, kind: str, target: str, stage: str, gw: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, kind, target, stage, gw],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "held\n"

    @property
    def pid(self) -> int:
        """The holder's process id."""
        return self.proc.pid

    def release(self) -> None:
        """Let go of the lock and end."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        """End the process whatever it is doing."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class Waiting(logging.Handler):
    """Sets ``seen`` when the lock module says a stage is waiting."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.seen.set()
