"""``/metrics``: the reference's names, per-gateway durations with bounded labels, the WAL's
group-commit sizes, and counts summed over the workers of ``lakesync gateway --workers 2``."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from gateway.metrics import OTHER_GATEWAYS, GatewayLabels, Metrics
from lakesync_platform.testing import GatewayProcess
from tests.helpers import SECRET, make_delta, token, wire

from .conftest import Gateway


def _value(text: str, sample: str) -> float:
    """The value of the exposed ``sample`` (name and labels exactly as printed)."""
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    assert match is not None, f"{sample} not in\n{text}"
    return float(match.group(1))


def test_push_and_pull_durations_per_gateway_and_group_commit_sizes(
    shared: Gateway, gw: str
) -> None:
    before = shared.client.get("/metrics").text
    groups = _value(before, "lakesync_wal_group_commit_size_sum")
    assert shared.push(gw, [shared.delta("r1", {"title": "x"})]).status_code == 200
    assert shared.push(gw, [shared.delta("r2", {"title": "y"})]).status_code == 200
    assert shared.pull(gw).status_code == 200
    text = shared.client.get("/metrics").text
    assert _value(text, f'lakesync_push_duration_seconds_count{{gateway="{gw}"}}') == 2
    assert _value(text, f'lakesync_push_duration_seconds_bucket{{gateway="{gw}",le="+Inf"}}') == 2
    assert _value(text, f'lakesync_pull_duration_seconds_count{{gateway="{gw}"}}') == 1
    assert _value(text, "lakesync_wal_group_commit_size_sum") == groups + 2  # one job per push
    assert _value(text, f'lakesync_wal_backlog_entries{{gateway="{gw}"}}') == 2
    assert _value(text, "lakesync_gateway_processes") == 1
    assert "_created" not in text


def test_gateway_labels_are_bounded() -> None:
    metrics = Metrics(gateway_labels=GatewayLabels(limit=2))
    metrics.observe_push("gw_a", "error", 0.001)  # a failed push claims no name
    for gw in ("gw_b", "gw_c", "gw_d", "gw_a"):
        metrics.observe_push(gw, "ok", 0.001)
    text = metrics.render({"gw_b": (1, 10), "gw_e": (2, 20), "gw_f": (3, 30)})
    counts = {
        label: _value(text, f'lakesync_push_duration_seconds_count{{gateway="{label}"}}')
        for label in ("gw_b", "gw_c", OTHER_GATEWAYS)
    }
    assert counts == {"gw_b": 1, "gw_c": 1, OTHER_GATEWAYS: 3}
    assert 'gateway="gw_a"' not in text and 'gateway="gw_d"' not in text
    # the backlog of every gateway past the limit adds up under the overflow label
    assert _value(text, 'lakesync_wal_backlog_entries{gateway="gw_b"}') == 1
    assert _value(text, f'lakesync_wal_backlog_entries{{gateway="{OTHER_GATEWAYS}"}}') == 5
    assert _value(text, f'lakesync_buffer_bytes{{gateway="{OTHER_GATEWAYS}"}}') == 50
    assert _value(text, 'lakesync_push_total{status="ok"}') == 4


def _workers(parent: int) -> set[int]:
    """The uvicorn workers (``spawn`` children) of ``parent``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def _scrape(proc: GatewayProcess) -> str:
    status, body = proc.request("GET", "/metrics")  # a new connection: any worker answers
    assert status == 200
    return body.decode()


@pytest.mark.slow
def test_two_workers_sum_their_counts(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, SECRET, workers=2).start(timeout=60) as proc:
        assert proc.proc is not None
        gw = "gw_metrics"
        auth = {"Authorization": "Bearer " + token("c1", gw), "Connection": "close"}
        now = int(time.time() * 1000) << 16
        with httpx.Client(base_url=proc.url, headers=auth, timeout=10) as client:
            for i in range(20):  # new connections, spread over both workers by the kernel
                d = make_delta("c1", now + i, "todos", f"r{i}", {"n": i})
                resp = client.post(
                    f"/v1/sync/{gw}/push", json={"clientId": "c1", "deltas": [wire(d)]}
                )
                assert resp.status_code == 200, resp.text
        for _ in range(6):  # whichever worker answers, it reports the sum of both
            text = _scrape(proc)
            assert _value(text, 'lakesync_push_total{status="ok"}') == 20
            assert _value(text, f'lakesync_push_duration_seconds_count{{gateway="{gw}"}}') == 20
            assert _value(text, "lakesync_wal_group_commit_size_sum") == 20
            assert _value(text, "lakesync_gateway_processes") == 2
            assert _value(text, f'lakesync_wal_backlog_entries{{gateway="{gw}"}}') == 20

        # a worker that dies is replaced; its counts stay, its live gauge goes
        workers = _workers(proc.proc.pid)
        assert len(workers) == 2
        os.kill(min(workers), signal.SIGKILL)
        assert proc.log_path is not None
        deadline = time.monotonic() + 30
        while proc.log_path.read_text().count("gateway ready") < 3:  # the replacement's app
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
        text = _scrape(proc)
        assert _value(text, "lakesync_gateway_processes") == 2
        assert _value(text, 'lakesync_push_total{status="ok"}') == 20
