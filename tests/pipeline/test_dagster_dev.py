"""``dagster dev -w workspace.yaml`` answers on its port and lists the pipeline's assets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lakesync_platform.testing import free_port

REPO = Path(__file__).resolve().parents[2]


def _post_json(url: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.load(response))


@pytest.mark.slow
def test_dagster_dev_serves_the_assets(tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "dagster"
    home.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LAKESYNC_DATA_DIR": str(tmp_path / "data"),
        "LAKESYNC_DEFS_DIR": str(REPO / "defs"),
    }
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.Popen(
        [
            str(dagster),
            "dev",
            "-w",
            str(REPO / "workspace.yaml"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        keys: list[str] = []
        while time.monotonic() < deadline and not keys:
            assert proc.poll() is None, "dagster dev exited"
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                    pass
                data = _post_json(
                    f"http://127.0.0.1:{port}/graphql",
                    {"query": "{ assetNodes { assetKey { path } } }"},
                )
                nodes = data.get("data", {}).get("assetNodes") or []  # type: ignore[union-attr]
                keys = ["/".join(n["assetKey"]["path"]) for n in nodes]
            if not keys:
                time.sleep(1)
        assert {"demo/lakesync_deltas", "demo/state/todos", "demo/local/todos"} <= set(keys)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
