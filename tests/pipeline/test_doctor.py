"""``lakesync doctor`` on a healthy data directory and on broken ones: what is wrong, the command
that fixes it, exit status 0 or 1, and ``--json``."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakesync_platform.cli.doctor import doctor
from lakesync_platform.cli.run import run
from lakesync_platform.testing import free_port

from .conftest import REPO, Pusher

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.mariadb]


def _defs(folder: Path, gw: str, postgres_port: int = 5432) -> Path:
    folder.mkdir()
    (folder / "t.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n  - {table: todos, columns: [{name: title, type: string}]}\n"
        "destinations:\n"
        "  - {name: local, kind: sqlite, url: 'sqlite:///${LAKESYNC_DATA_DIR}/out.db'}\n"
        f"  - {{name: pg, kind: postgres, url: 'postgresql://postgres@127.0.0.1:{postgres_port}/postgres'}}\n"
        "  - {name: maria, kind: mysql, url: 'mysql+pymysql://root:@127.0.0.1:3306/test'}\n"
    )
    return folder


@pytest.fixture
def data_dir(
    spark: Any, lake_dir: Path, wal_url: str, gw: str, pusher: Pusher, tmp_path: Path
) -> Iterator[Path]:
    """A healthy data directory: the jars, a WAL with a flushed gateway, and an embedded catalog
    holding that gateway's Iceberg table (copied from the shared lake, its files in place)."""
    pusher.write("a", "r1", title="hello")
    flushed = CliRunner().invoke(
        run, ["flush", "--gw", gw, "--data-dir", str(lake_dir), "--wal-url", wal_url]
    )
    assert flushed.exit_code == 0, flushed.output
    data = tmp_path / "data"
    data.mkdir()
    (data / "jars").symlink_to(REPO / "data" / "jars")  # the suite's jar folder
    (data / "wal.db").symlink_to(wal_url.removeprefix("sqlite:///"))
    with (
        closing(sqlite3.connect(lake_dir / "catalog.db")) as lake,
        closing(sqlite3.connect(data / "catalog.db")) as copy,
    ):
        lake.backup(copy)
        copy.execute("DELETE FROM iceberg_tables WHERE table_namespace != ?", (gw,))
        copy.commit()
    yield data


def _doctor(data: Path, defs: Path, *ports: int, json_output: bool = False) -> tuple[int, str]:
    gateway_port, dagster_port = ports or (free_port(), free_port())
    args = ["--data-dir", str(data), "--defs", str(defs)]
    args += ["--gateway-port", str(gateway_port), "--dagster-port", str(dagster_port)]
    result = CliRunner().invoke(doctor, [*args, *(["--json"] if json_output else [])])
    if json_output:
        return result.exit_code, result.output
    # Columns are padded for the eye; the assertions read single spaces.
    return result.exit_code, "\n".join(
        " ".join(line.split()) for line in result.output.splitlines()
    )


def test_a_healthy_data_directory(data_dir: Path, gw: str, tmp_path: Path) -> None:
    code, output = _doctor(data_dir, _defs(tmp_path / "defs", gw))
    assert code == 0, output
    assert output.splitlines()[-1] == "all good"
    wal_line = next(line for line in output.splitlines() if line.startswith("ok wal "))
    assert wal_line.startswith(f"ok wal {data_dir}/wal.db: ") and gw in wal_line, output
    assert f"catalog {data_dir}/catalog.db (1 tables)" in output
    assert f"destination {gw}/pg" in output and "answers" in output
    code, output = _doctor(data_dir, tmp_path / "defs", json_output=True)
    report = json.loads(output)
    assert code == 0 and report["ok"] is True
    checks = {c["check"] for c in report["checks"] if c["ok"]}
    assert {"java", "jars", "wal", "catalog", f"destination {gw}/maria"} <= checks


def test_what_is_broken_and_the_command_that_fixes_it(
    data_dir: Path, gw: str, tmp_path: Path
) -> None:
    (data_dir / "jars").unlink()
    (data_dir / "jars").mkdir()
    with closing(sqlite3.connect(data_dir / "catalog.db")) as catalog:
        catalog.execute("UPDATE iceberg_tables SET metadata_location = 'file:///nowhere/m.json'")
        catalog.commit()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        down = free_port()
        code, output = _doctor(
            data_dir, _defs(tmp_path / "defs", gw, postgres_port=down), port, free_port()
        )
    _, as_json = _doctor(data_dir, tmp_path / "defs", free_port(), free_port(), json_output=True)
    assert code == 1, output
    assert "FAIL jars" in output and f"fix: lakesync setup --data-dir {data_dir}" in output
    assert f"FAIL catalog {data_dir}/catalog.db: metadata files missing" in output
    assert f"FAIL destination {gw}/pg" in output and f"127.0.0.1:{down}" in output
    assert "fix: start PostgreSQL at that address" in output
    assert f"FAIL port {port} in use by pid {os.getpid()} (" in output
    assert "fix: stop it, or choose another port with lakesync dev --gateway-port N" in output
    assert output.splitlines()[-1] == "4 problem(s)"
    report = json.loads(as_json)
    failed = {c["check"]: c["fix"] for c in report["checks"] if not c["ok"]}
    assert report["ok"] is False and set(failed) == {"jars", "catalog", f"destination {gw}/pg"}


def test_no_data_directory(tmp_path: Path) -> None:
    code, output = _doctor(tmp_path / "nowhere", tmp_path / "no-defs")
    assert code == 1
    assert f"fix: lakesync setup --data-dir {tmp_path / 'nowhere'}" in output
    assert not (tmp_path / "nowhere").exists()


def test_a_wal_that_is_not_a_database(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "wal.db").write_text("not a database")
    code, output = _doctor(data, tmp_path / "no-defs")
    assert code == 1 and f"FAIL wal {data}/wal.db:" in output
    assert f"fix: move the damaged {data}/wal.db aside, then lakesync dev" in output
    assert (data / "wal.db").read_text() == "not a database"
