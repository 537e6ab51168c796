"""``scripts/setup.sh`` on a prepared machine: a line per step with its time, the same result on
a second run (idempotent), and nothing reinstalled.

The script runs for real (system package checks, services, the ``lakesync setup`` step) in a
copy of the repository's skeleton whose ``.venv`` is already installed: its ``python`` is this
interpreter, its ``lakesync`` runs this checkout, and its install stamp is fresh, so the pip
step is skipped as on any machine where setup has run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow


def _prepared_copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    os.utime(repo / "pyproject.toml", (0, 0))  # older than the install stamp
    venv_bin = repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    (venv_bin / "lakesync").write_text(
        f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m lakesync_platform.cli "$@"\n'
    )
    (venv_bin / "lakesync").chmod(0o755)
    (repo / ".venv" / ".lakesync-installed").touch()
    # The BigQuery emulator's own venv, installed beside the project's by an earlier setup.
    shutil.copy2(ROOT / "scripts" / "bqemulator-requirements.txt", repo / "scripts")
    os.utime(repo / "scripts" / "bqemulator-requirements.txt", (0, 0))
    installed, bq = Path(sys.prefix) / "bqemulator", repo / ".venv" / "bqemulator"
    bq.mkdir()
    for part in ("bin", "lib", "pyvenv.cfg"):
        (bq / part).symlink_to(installed / part)
    (bq / ".installed").touch()
    if (ROOT / "data" / "jars").is_dir():  # filled by an earlier setup; else setup fills it
        (repo / "data").mkdir()
        (repo / "data" / "jars").symlink_to((ROOT / "data" / "jars").resolve())
    return repo


def test_setup_reports_each_step_with_its_time_and_is_idempotent(tmp_path: Path) -> None:
    repo = _prepared_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    runs = [
        subprocess.run(
            ["bash", str(repo / "scripts" / "setup.sh")],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "pip install" not in run.stderr  # the stamp is fresh: nothing reinstalled
        assert re.search(r"\[setup\]\S* lakesync setup …\n", run.stderr), run.stderr
        assert re.search(r"lakesync setup: done in \d+s\n", run.stderr), run.stderr
        assert re.search(r"ready in \d+s\n$", run.stderr), run.stderr
    jars = [p.name for p in (repo / "data" / "jars").iterdir()]
    assert any(name.startswith("iceberg-spark-runtime") for name in jars), jars
