"""Helpers for testing code built on LakeSync, shipped in the package (as ``structlog.testing``).

* :class:`GatewayProcess` — ``lakesync gateway`` in a real subprocess on a free loopback port,
  ready when its ``/ready`` answers; ``kill()`` is a crash (SIGKILL), ``stop()`` a shutdown.
* :class:`ManualClock` — an epoch-millisecond clock that moves only when told to.
* The demo's ``todos`` table (:data:`DEMO_TODOS`, :func:`demo_todos_schema`) and its
  declarations file (:func:`demo_declarations_yaml`), one definition for the demo, the examples,
  the tests and the benchmarks.
* :class:`S3Server` — moto's S3-speaking server in a subprocess on a free loopback port, with
  the ``AWS_*`` environment that points the lake at it.
* :class:`BigQueryEmulator` — ``bqemulator`` (installed by ``scripts/setup.sh`` in a venv of
  its own beside the project's) in a subprocess on free loopback ports, ready when its REST API
  answers.
* :func:`free_port`, :func:`dev_token`.

The test suite, the benchmarks and ``lakesync dev`` use these; nothing else in the package
imports this module.

::

    with GatewayProcess(tmp_path, secret="s").start() as gw:
        httpx.get(gw.url + "/health")
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from .core.auth import sign_token
from .core.schema import TableSchema, parse_table_schema
from .settings import (
    ENV_AWS_ACCESS_KEY_ID,
    ENV_AWS_ENDPOINT_URL,
    ENV_AWS_REGION,
    ENV_AWS_SECRET_ACCESS_KEY,
    ENV_DATA_DIR,
)

__all__ = [
    "BIGQUERY_EMULATOR_PROJECT",
    "DEMO_GATEWAY",
    "DEMO_TODOS",
    "BigQueryEmulator",
    "GatewayProcess",
    "ManualClock",
    "S3Server",
    "Served",
    "demo_declarations_yaml",
    "demo_todos_schema",
    "dev_token",
    "free_port",
    "stop_group",
]

DEMO_GATEWAY = "demo"
"""The gateway id of the demo that ``lakesync dev`` runs."""

DEMO_TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "completed", "type": "boolean"},
        {"name": "priority", "type": "number"},
        {"name": "tags", "type": "json"},
    ],
    "softDelete": True,
}
"""The demo's ``todos`` table in the admin route's TableSchema JSON (as ``defs/todos.yaml``)."""


def demo_todos_schema() -> TableSchema:
    """:data:`DEMO_TODOS` parsed."""
    return parse_table_schema(DEMO_TODOS)


def demo_declarations_yaml() -> str:
    """The demo's declarations file: :data:`DEMO_TODOS` on gateway ``demo``, materialised into
    ``<data-dir>/destination.db`` (the content of the repository's ``defs/todos.yaml``)."""
    columns = "".join(
        f"      - {{name: {c['name']}, type: {c['type']}}}\n" for c in DEMO_TODOS["columns"]
    )
    return (
        f"gateway: {DEMO_GATEWAY}\n"
        "tables:\n"
        f"  - table: {DEMO_TODOS['table']}\n"
        "    columns:\n"
        f"{columns}"
        "    softDelete: true\n"
        "destinations:\n"
        "  - name: local\n"
        "    kind: sqlite\n"
        f'    url: "sqlite:///${{{ENV_DATA_DIR}}}/destination.db"\n'
        f"    tables: [{DEMO_TODOS['table']}]\n"
    )


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dev_token(sub: str, gw: str, secret: str, role: str = "client", **claims: Any) -> str:
    """A token for ``sub`` on ``gw`` signed with ``secret``, valid from now for an hour."""
    return sign_token(
        {"sub": sub, "gw": gw, "role": role, **claims}, secret, now_s=int(time.time())
    )


class ManualClock:
    """An epoch-millisecond clock that only moves when told to; call it to read it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now_ms

    def advance(self, ms: int) -> int:
        """Move forward by ``ms``; returns the new time."""
        with self._lock:
            self.now_ms += ms
            return self.now_ms

    def set(self, now_ms: int) -> None:
        """Jump to ``now_ms`` (backwards too: a clock step)."""
        with self._lock:
            self.now_ms = now_ms


class Served:
    """A process a test serves from: ``with`` starts it (unless started) and stops it."""

    proc: subprocess.Popen[bytes] | None

    def start(self, timeout: float = 60.0) -> Self:
        """Start the process and wait until it answers."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the process."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self if self.proc is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass
class GatewayProcess(Served):
    """``lakesync gateway`` in a subprocess on a free port of 127.0.0.1.

    ``secret`` signs and checks tokens (``None``: ``--no-auth``, local development only).
    ``LAKESYNC_*`` variables of the calling environment are not passed on (the flags say
    everything); ``env`` adds variables (``PYTHONPATH`` to run another copy of the code);
    ``cwd`` is where the process starts. The log goes to ``log_path`` (default
    ``<data_dir>/gateway-<port>.log``).
    """

    data_dir: Path
    secret: str | None
    wal_url: str | None = None
    workers: int = 1
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        """The gateway's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The command line that starts the gateway."""
        args = [
            sys.executable,
            "-m",
            "lakesync_platform.cli",
            "gateway",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--log-level",
            "warning",
        ]
        args += ["--no-auth"] if self.secret is None else ["--jwt-secret", self.secret]
        if self.workers != 1:
            args += ["--workers", str(self.workers)]
        if self.wal_url:
            args += ["--wal-url", self.wal_url]
        return [*args, *self.extra_args]

    def start(self, timeout: float = 60.0) -> GatewayProcess:
        """Start the process and wait until ``/ready`` answers 200 and, with several workers,
        every worker has logged that its app is ready."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:
            self.log_path = self.data_dir / f"gateway-{self.port}.log"
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.cwd,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited:\n{self.log_tail()}")
            try:
                if self.request("GET", "/ready", timeout=2)[0] == 200 and (
                    self.workers == 1 or self._apps_ready(log_start) >= self.workers
                ):
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()  # not left running behind the error (a `with` block never started)
        raise RuntimeError(f"gateway did not become ready:\n{self.log_tail()}")

    def _apps_ready(self, log_start: int) -> int:
        """How many worker apps logged ``gateway ready`` since this start."""
        assert self.log_path is not None
        with open(self.log_path, "rb") as log:
            log.seek(log_start)
            return log.read().count(b"gateway ready")

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        token: str | None = None,
        timeout: float = 60,
    ) -> tuple[int, bytes]:
        """One plain HTTP/1.1 request (no client library in the way): ``(status, body)``."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            conn.request(method, path, body, headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the process's log."""
        try:
            return self.log_path.read_text()[-chars:] if self.log_path else ""
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


def stop_group(proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM the process group ``proc`` leads (started with ``start_new_session``), then
    SIGKILL it if ``proc`` has not exited within ``timeout`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class S3Server(Served):
    """moto's S3 server (``python -m moto.server``, from ``moto[server]``) on a free loopback
    port: a real S3 wire protocol for Spark's and pyiceberg's S3 clients, state in memory."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The endpoint URL (``AWS_ENDPOINT_URL``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables that point an S3 client at this server."""
        return {
            ENV_AWS_ENDPOINT_URL: self.endpoint,
            ENV_AWS_REGION: "us-east-1",
            ENV_AWS_ACCESS_KEY_ID: "testing",
            ENV_AWS_SECRET_ACCESS_KEY: "testing",
        }

    def _request(self, method: str, path: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server and wait until it answers."""
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.proc.returncode}")
            try:
                if self._request("GET", "/") == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("moto server did not answer")

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (S3 ``CreateBucket``)."""
        status = self._request("PUT", f"/{name}")
        if status != 200:
            raise RuntimeError(f"CreateBucket {name!r} answered {status}")

    def stop(self) -> None:
        """Stop the server (its buckets are gone with it)."""
        stop_group(self.proc, 10.0)


BIGQUERY_EMULATOR_PROJECT = "test-proj"
"""The project the BigQuery emulator serves by default."""


def bqemulator_path() -> Path:
    """The ``bqemulator`` executable: the venv ``scripts/setup.sh`` makes for it inside the
    project's venv (its pins conflict with the project's), else one on ``PATH``."""
    beside = Path(sys.prefix) / "bqemulator" / "bin" / "bqemulator"
    if beside.exists():
        return beside
    found = shutil.which("bqemulator")
    if found is None:
        raise RuntimeError(f"bqemulator is not installed ({beside}): run scripts/setup.sh")
    return Path(found)


@dataclass
class BigQueryEmulator(Served):
    """The BigQuery emulator (``bqemulator``) on free ports of 127.0.0.1, in memory.

    ``endpoint`` is what a client's ``api_endpoint`` (or a destination's ``endpoint``) takes.
    """

    log_path: Path
    project: str = BIGQUERY_EMULATOR_PROJECT
    port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The REST endpoint."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> BigQueryEmulator:
        """Start the emulator and wait until it lists the project's datasets."""
        args = [str(bqemulator_path()), "start", "--rest-port", str(self.port)]
        args += ["--grpc-port", str(self.grpc_port), "--project", self.project]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        path = f"/bigquery/v2/projects/{self.project}/datasets"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bqemulator exited:\n{self.log_path.read_text()[-3000:]}")
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", path)
                if conn.getresponse().status == 200:
                    return self
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"bqemulator did not answer:\n{self.log_path.read_text()[-3000:]}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the emulator, then SIGKILL if it has not exited within ``timeout`` s."""
        stop_group(self.proc, timeout)
