"""A Spark Connect server for a benchmark lake: ``lakesync spark-server`` of the code under test.

:class:`ConnectServer` starts ``python -m lakesync_platform.cli spark-server --data-dir D
--port P`` from a code tree (``PYTHONPATH=tree``) in a session of its own, on a free port, and
waits until the port answers; :meth:`ConnectServer.stop` sends SIGTERM (the command passes it
on to the server's JVM) and kills the session if it lingers. Runs connect with
``LAKESYNC_SPARK_REMOTE`` = :attr:`ConnectServer.url`.

This module imports nothing of the product.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from .cpu import tree_cpu
from .job_runs import kill_session, tail

__all__ = ["ConnectServer", "free_port"]


def free_port() -> int:
    """A TCP port nothing listens on now (on loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    with (
        contextlib.suppress(OSError),
        socket.create_connection(("127.0.0.1", port), timeout=0.5),
    ):
        return True
    return False


class ConnectServer:
    """One ``lakesync spark-server`` process (and its JVM) serving ``data_dir``."""

    def __init__(self, tree: Path, data_dir: Path, env: Mapping[str, str], log_path: Path) -> None:
        self.tree = tree
        self.data_dir = data_dir
        self.env = {**env, "PYTHONPATH": str(tree)}
        self.log_path = log_path
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_s: float | None = None

    @property
    def url(self) -> str:
        """The server's Spark Connect URL."""
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 240.0) -> float:
        """Start the server and wait until it answers; the seconds that took. Raises
        ``RuntimeError`` (with the end of its log) when it exits or times out first."""
        cmd = [sys.executable, "-m", "lakesync_platform.cli", "spark-server"]
        cmd += ["--data-dir", str(self.data_dir), "--port", str(self.port)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.tree,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        while time.perf_counter() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"spark-server exited with {self.proc.returncode}:\n{tail(self.log_path)}"
                )
            if _answers(self.port):
                self.start_s = round(time.perf_counter() - started, 2)
                return self.start_s
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"spark-server did not answer within {timeout_s:.0f} s")

    def cpu_s(self) -> float:
        """CPU seconds the server's process tree has used so far."""
        return tree_cpu(self.proc.pid) if self.proc is not None else 0.0

    def stop(self) -> None:
        """Stop the server and its JVM (idempotent)."""
        if self.proc is not None:
            kill_session(self.proc)
            self.proc = None
