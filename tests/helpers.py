"""Test helpers: a real gateway process, tokens, and delta builders."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lakesync_platform.core.auth import sign_token
from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.ids import delta_id

ROOT = Path(__file__).resolve().parents[1]
SECRET = "test-secret-do-not-use"


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def token(sub: str, gw: str, role: str = "client", secret: str = SECRET, **claims: Any) -> str:
    """A valid token for ``sub`` on ``gw``."""
    return sign_token(
        {"sub": sub, "gw": gw, "role": role, **claims}, secret, now_s=int(time.time())
    )


def make_delta(
    client_id: str,
    hlc: int,
    table: str,
    row_id: str,
    columns: dict[str, Any] | None,
    op: str = "UPDATE",
) -> RowDelta:
    """A delta with a correct content id (``columns=None`` → DELETE)."""
    cols = tuple(ColumnDelta(k, v) for k, v in (columns or {}).items())
    if columns is None:
        op = "DELETE"
    return RowDelta(
        op, table, row_id, client_id, cols, hlc, delta_id(client_id, hlc, table, row_id, cols)
    )


def wire(d: RowDelta) -> dict[str, Any]:
    """A delta's JSON wire form."""
    return {
        "op": d.op,
        "table": d.table,
        "rowId": d.row_id,
        "clientId": d.client_id,
        "columns": [{"column": c.column, "value": c.value} for c in d.columns],
        "hlc": str(d.hlc),
        "deltaId": d.delta_id,
    }


@dataclass
class GatewayProcess:
    """``lakesync gateway`` in a subprocess on a free port."""

    data_dir: Path
    wal_url: str | None = None
    extra_args: Sequence[str] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> GatewayProcess:
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
            "--jwt-secret",
            SECRET,
            "--log-level",
            "warning",
            *self.extra_args,
        ]
        if self.wal_url:
            args += ["--wal-url", self.wal_url]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / f"gateway-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"gateway did not become ready: {self.log_path.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
