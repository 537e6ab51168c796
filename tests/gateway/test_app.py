"""The app factory and the server: ``create_app(settings)`` needs nothing from the environment,
the gateway-id rule and the error registry hold end to end, the guard reads the injected clock,
and ``lakesync gateway --workers N`` serves from N worker processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar, get
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.errors import handle_lakesync_error
from lakesync_platform.client import TransportError
from lakesync_platform.client._errors import error_from_envelope
from lakesync_platform.core.errors import ERRORS_BY_CODE, LakeSyncError, RateLimitedError
from lakesync_platform.settings import GatewaySettings
from lakesync_platform.testing import GatewayProcess
from tests.helpers import SECRET, make_delta, token, wire

from .conftest import Gateway, assert_error

GATEWAY_SOURCES = Path(__file__).resolve().parents[2] / "gateway"


def test_create_app_needs_only_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("LAKESYNC_"):
            monkeypatch.delenv(name)
    settings = GatewaySettings(wal_url=f"sqlite:///{tmp_path / 'wal.db'}", jwt_secrets=(SECRET,))
    gw = "gw_settings"
    auth = {"Authorization": "Bearer " + token("c1", gw)}
    delta = make_delta("c1", int(time.time() * 1000) << 16, "todos", "r1", {"title": "x"})
    with TestClient(create_app(settings)) as client:
        assert client.get("/ready").json() == {"status": "ready"}
        body = {"clientId": "c1", "deltas": [wire(delta)]}
        assert client.post(f"/v1/sync/{gw}/push", json=body, headers=auth).status_code == 200
        pulled = client.get(f"/v1/sync/{gw}/pull?since=0&clientId=c1", headers=auth).json()
        assert [d["rowId"] for d in pulled["deltas"] if d["op"] == "INSERT"] == ["r1"]


def test_the_gateway_reads_no_environment() -> None:
    for path in GATEWAY_SOURCES.rglob("*.py"):
        text = path.read_text("utf-8")
        if path.name == "serve.py":  # writes, for its workers, where their metrics go
            text = text.replace("os.environ[METRICS_DIR_ENV] = ", "", 1)
        assert "os.environ" not in text and "getenv" not in text, path


def test_a_dotted_gateway_id_is_refused_with_the_rule(shared: Gateway) -> None:
    gw = "demo.prod"
    resp = shared.push(gw, [shared.delta("r1", {"title": "x"})])
    body = assert_error(resp, 400, "VALIDATION_ERROR")
    assert body["error"] == (
        "Invalid gateway id: 'demo.prod' (1-64 characters: letters, digits, '_' or '-', "
        "starting with a letter or digit)"
    )
    assert gw not in shared.state.wal.gateway_ids()


def test_the_guard_verifies_tokens_against_the_injected_clock(tmp_path: Path) -> None:
    settings = GatewaySettings(wal_url=f"sqlite:///{tmp_path / 'wal.db'}", jwt_secrets=(SECRET,))
    two_hours_ahead = int(time.time() * 1000) + 2 * 3600 * 1000
    gw = "gw_clock"
    with TestClient(create_app(settings, clock=lambda: two_hours_ahead)) as client:
        resp = client.get(
            f"/v1/sync/{gw}/pull?since=0&clientId=c1",
            headers={"Authorization": "Bearer " + token("c1", gw)},  # expires in one hour
        )
        assert_error(resp, 401, "AUTH_ERROR", "JWT has expired")


@pytest.mark.parametrize("code", list(ERRORS_BY_CODE))
def test_every_registered_error_round_trips_through_the_gateway_and_the_client(code: str) -> None:
    cls = ERRORS_BY_CODE[code]

    @get("/fail", sync_to_thread=False)
    def fail() -> None:
        if cls is RateLimitedError:
            raise RateLimitedError("slow down", retry_after=3)
        raise cls("boom")

    app = Litestar([fail], exception_handlers={LakeSyncError: handle_lakesync_error})
    with TestClient(app) as client:
        resp = client.get("/fail")
    assert resp.status_code == cls.http_status
    body: dict[str, Any] = resp.json()
    assert body["code"] == code
    parsed = error_from_envelope(resp.status_code, body, resp.headers.get("retry-after"))
    if cls is LakeSyncError:
        assert isinstance(parsed, TransportError) and parsed.status == 500
    else:
        assert type(parsed) is cls and parsed.code == code
    if cls is RateLimitedError:
        assert isinstance(parsed, RateLimitedError) and parsed.retry_after == 3


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _is_worker(pid: int) -> bool:
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.slow
def test_two_workers_serve_one_socket(tmp_path: Path) -> None:
    proc = GatewayProcess(tmp_path, SECRET, workers=2).start(timeout=60)
    try:
        assert proc.proc is not None
        workers = [pid for pid in _children(proc.proc.pid) if _is_worker(pid)]
        assert len(workers) == 2
        gw = "gw_workers"
        auth = {"Authorization": "Bearer " + token("c1", gw)}
        now = int(time.time() * 1000) << 16
        with httpx.Client(base_url=proc.url, headers=auth, timeout=10) as client:
            for i in range(20):  # new connections, spread over both workers by the kernel
                d = make_delta("c1", now + i, "todos", f"r{i}", {"n": i})
                body = {"clientId": "c1", "deltas": [wire(d)]}
                resp = client.post(
                    f"/v1/sync/{gw}/push", json=body, headers={"Connection": "close"}
                )
                assert resp.status_code == 200, resp.text
            page = client.get(f"/v1/sync/{gw}/pull", params={"since": "0", "clientId": "c1"})
            rows = {d["rowId"] for d in page.json()["deltas"] if d["op"] == "INSERT"}
            assert rows == {f"r{i}" for i in range(20)}
        assert proc.log_path is not None
        assert proc.log_path.read_text().count("gateway ready") == 2  # one app per worker
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(20) == 0
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() and _is_worker(pid) for pid in workers):
            assert time.monotonic() < deadline, "workers outlived the server"
            time.sleep(0.1)
    finally:
        proc.stop()
