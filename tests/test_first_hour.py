"""docs/first-hour.md works as written: its ``bash test`` blocks, run in order in one shell.

The blocks run as a newcomer runs them after ``scripts/setup.sh`` and activating ``.venv`` (so
``lakesync`` and ``python`` are the project's), in a fresh folder holding the repository's
``defs/`` and ``examples/`` and a ``data/`` whose jars are the ones setup filled, with the ports
of ``lakesync dev`` moved to free ones (the only edit made to the commands).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakesync_platform.testing import free_port
from tests.helpers import ROOT

pytestmark = pytest.mark.slow

GUIDE = ROOT / "docs" / "first-hour.md"
_TESTED_BLOCK = re.compile(r"^```bash test\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def guide_script(gateway_port: int, dagster_port: int) -> str:
    """The guide's tested blocks as one script, on the given ports."""
    ports = f"--gateway-port {gateway_port} --dagster-port {dagster_port}"
    blocks = _TESTED_BLOCK.findall(GUIDE.read_text())
    script = "\n".join(blocks)
    script = re.sub(r"\blakesync (dev|doctor)\b", rf"lakesync \1 {ports}", script)
    return script.replace("127.0.0.1:8000", f"127.0.0.1:{gateway_port}")


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    """The newcomer's folder and a ``bin`` folder standing for the activated ``.venv``."""
    home = tmp_path / "clone"
    home.mkdir()
    for name in ("defs", "examples"):
        (home / name).symlink_to(ROOT / name)
    if (ROOT / "data" / "jars").is_dir():  # filled by scripts/setup.sh
        (home / "data").mkdir()
        (home / "data" / "jars").symlink_to((ROOT / "data" / "jars").resolve())
    venv = tmp_path / "venv-bin"
    venv.mkdir()
    for name, command in (("python", ""), ("lakesync", " -m lakesync_platform.cli")):
        (venv / name).write_text(f'#!/bin/sh\nexec {sys.executable}{command} "$@"\n')
        (venv / name).chmod(0o755)
    return home, venv


def _stop_leftover_dev(dagster_port: int) -> None:
    """SIGTERM a ``lakesync dev`` the script left running (it then stops its children)."""
    flag = f"--dagster-port\0{dagster_port}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"lakesync_platform.cli\0dev" in cmdline and flag in cmdline:
            os.kill(int(pid), signal.SIGTERM)
            deadline = time.monotonic() + 15
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)


def test_the_guide_has_tested_blocks_for_every_step() -> None:
    script = guide_script(8000, 3000)
    for command in ("lakesync setup", "lakesync dev", "examples/todo.py", "create_client"):
        assert command in script
    for command in ("lakesync status", "lakesync doctor", "kill -INT %1", "lakesync run flush"):
        assert command in script


def test_the_first_hour_guide_runs_as_written(tmp_path: Path) -> None:
    gateway_port, dagster_port = free_port(), free_port()
    home, venv = _workspace(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "DAGSTER_"))}
    env["PATH"] = f"{venv}:{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)  # the checkout under test
    env["LAKESYNC_URL"] = f"http://127.0.0.1:{gateway_port}"  # the example's --url, moved
    try:
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + guide_script(gateway_port, dagster_port)],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        _stop_leftover_dev(dagster_port)
    out = done.stdout
    assert done.returncode == 0, f"{out}\n{done.stderr}\n{_dev_log(home)}"
    assert out.count("all good") == 2, out
    assert "running — open the Dagster UI" in out
    assert "Read the first-hour guide  (alice)" in out
    assert "sent 1, received" in out
    assert "demo: cursor=" in out
    assert (home / "data" / "destination.db").exists()
    assert "stopped" in _dev_log(home)
    # `wait %1` returned: lakesync dev is gone, and with it every process it started.
    assert _processes_mentioning(home) == {}


def _processes_mentioning(home: Path) -> dict[int, str]:
    """Live processes whose command line names the newcomer's folder (zombies are gone)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(home) in cmdline and stat[stat.rfind(")") + 2] != "Z":
            found[int(pid)] = cmdline
    return found


def _dev_log(home: Path) -> str:
    log = home / "data" / "dev.log"
    return log.read_text() if log.exists() else "(no dev.log)"
