"""``lakesync setup`` and ``lakesync run`` (in-process, on the shared Spark session)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakesync_platform.cli.run import dev, run, setup
from lakesync_platform.install.jars import pinned_jars
from lakesync_platform.pipeline.lock import FileLakeLock
from lakesync_platform.settings import ENV_JAR_DIR, DataLayout
from lakesync_platform.testing import free_port
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import Pusher


def test_setup_fills_the_jar_folder_with_maven_idempotently(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(setup, ["--data-dir", str(tmp_path)])
    try:
        assert first.exit_code == 0, first.output
        folder = tmp_path / "jars"
        jars = {p.name for p in folder.iterdir()}
        pinned = {jar.file_name for jar in pinned_jars()}
        assert {j for j in jars if not j.startswith("lakesync-local-fs-")} == pinned
        assert len(jars) == len(pinned) + 1  # and the fork-free local filesystem
        lines = first.output.splitlines()
        # One line per step with its elapsed time; the long one announces itself first.
        assert lines[1].startswith("jars") and "dependency:copy-dependencies" in lines[1]
        assert any(line.startswith("jars") and "fetched" in line for line in lines)
        assert all(line.endswith("s)") for line in lines[:-1] if not line.endswith("…"))
        stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
        again = runner.invoke(setup, ["--data-dir", str(tmp_path)])
        assert again.exit_code == 0, again.output
        assert f"{len(pinned)} up to date" in again.output and "…" not in again.output
        assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps
    finally:
        shutil.rmtree(tmp_path / "jars", ignore_errors=True)  # ~400 MB


def _one_gateway_defs(tmp_path: Path, gw: str) -> Path:
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "t.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n  - {table: todos, columns: [{name: title, type: string}]}\n"
        "destinations:\n"
        f"  - {{name: out, kind: sqlite, url: 'sqlite:///{tmp_path}/out.db'}}\n"
    )
    return defs


@pytest.mark.spark
def test_run_each_stage_once_says_what_it_did(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    tmp_path: Path,
) -> None:
    defs = _one_gateway_defs(tmp_path, gw)
    pusher.write("a", "r1", title="hello")
    pusher.write("a", "r2", title="world")
    pusher.delete("a", "r2")
    common = ["--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs), "--wal-url", wal_url]
    runner = CliRunner()
    said = {}
    for stage in ("flush", "state", "materialise"):
        result = runner.invoke(run, [stage, *common])
        assert result.exit_code == 0, result.output
        said[stage] = result
    took = r"in \d+\.\d s"
    assert re.fullmatch(
        rf"flush {gw}: 3 entries, WAL 1\.\.3, [\d ]+ B into the lake {took}\n", said["flush"].stdout
    )
    assert re.fullmatch(
        rf"state {gw}\.todos: 2 rows changed \(1 live\), log 1\.\.3 {took}\n",
        said["state"].stdout,
    )
    assert re.fullmatch(
        rf"materialise {gw} → todos: 1 upserted, 0 deleted, state 1\.\.3 {took}\n",
        said["materialise"].stdout,
    )
    # Progress on stderr: Spark's start, then the stage; nothing of the JVM's own log.
    assert re.fullmatch(
        rf"starting Spark \(JVM log: {re.escape(str(lake_dir / 'logs' / 'spark.log'))}\) …\n"
        rf"starting Spark done {took}\nflush {gw} …\nflush {gw} done {took}\n",
        said["flush"].stderr,
    )
    again = runner.invoke(run, ["flush", *common])
    assert re.fullmatch(
        rf"flush {gw}: nothing new \(the lake holds WAL \.\.3\) {took}\n", again.stdout
    )
    import sqlite3

    with sqlite3.connect(tmp_path / "out.db") as conn:
        assert conn.execute("SELECT row_id, title FROM todos").fetchall() == [("r1", "hello")]


@pytest.mark.spark
def test_run_json_prints_one_document_and_no_progress(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    tmp_path: Path,
) -> None:
    defs = _one_gateway_defs(tmp_path, gw)
    pusher.write("a", "r1", title="hello")
    common = ["--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs), "--wal-url", wal_url]
    runner = CliRunner()
    docs = {}
    for stage in ("flush", "state", "materialise"):
        result = runner.invoke(run, [stage, "--json", *common])
        assert result.exit_code == 0, result.output
        assert result.stderr == ""
        docs[stage] = json.loads(result.stdout)
    flush = docs["flush"]
    assert flush["stage"] == "flush" and flush["ok"] is True and flush["error"] is None
    [entry] = flush["results"]
    assert entry["kind"] == "flush" and entry["gateway_id"] == gw
    assert (entry["from_cursor"], entry["to_cursor"], entry["entries"]) == (1, 1, 1)
    assert entry["lake_bytes"] > 0 and entry["seconds"] >= 0 and flush["seconds"] >= 0
    [state] = docs["state"]["results"]
    assert state["kind"] == "state" and state["table"] == "todos"
    assert (state["rows_changed"], state["live_changed"], state["to_cursor"]) == (1, 1, 1)
    [mat] = docs["materialise"]["results"]
    assert mat["kind"] == "materialise" and (mat["upserted"], mat["deleted"]) == (1, 0)


@pytest.mark.spark
def test_run_json_reports_a_failed_stage_in_its_document(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    pusher: Pusher,
    tmp_path: Path,
) -> None:
    defs = _one_gateway_defs(tmp_path, gw)
    pusher.write("a", "r1", title="hello")
    holder = FileLakeLock((lake_dir / "catalog.db.lock").resolve(), 0)
    common = ["--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs), "--wal-url", wal_url]
    with holder.hold("state", "elsewhere"):
        result = CliRunner(env={"LAKESYNC_LOCK_TIMEOUT_SECONDS": "0"}).invoke(
            run, ["flush", "--json", *common]
        )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["results"] == []
    assert doc["error"]["code"] == "FLUSH_ERROR"
    assert f"held by pid {os.getpid()}" in doc["error"]["message"]
    assert "Error: flush failed: flush of" in result.stderr


def test_run_fails_with_nonzero_exit_on_a_bad_declaration(tmp_path: Path) -> None:
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "bad.yaml").write_text(
        "gateway: g\ntables:\n  - {table: t, columns: [{name: c, type: text}]}\n"
    )
    result = CliRunner().invoke(
        run,
        [
            "flush",
            "--data-dir",
            str(tmp_path),
            "--defs",
            str(defs),
            "--wal-url",
            "sqlite:///" + str(tmp_path / "wal.db"),
        ],
    )
    assert result.exit_code == 1
    assert "Invalid column type" in result.output


def test_run_without_a_data_directory_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "data"
    result = CliRunner().invoke(
        run, ["flush", "--data-dir", str(missing), "--defs", str(tmp_path / "defs")]
    )
    assert result.exit_code == 2, result.output
    assert f"no data directory {missing}" in result.output
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_run_without_a_wal_creates_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(run, ["state", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"no WAL at {tmp_path / 'wal.db'}" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_run_on_an_unknown_gateway_creates_nothing(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "t.yaml").write_text(
        "gateway: declared\ntables:\n  - {table: t, columns: [{name: c, type: string}]}\n"
    )
    data = tmp_path / "data"
    data.mkdir()
    args = ["flush", "--gw", "nosuch", "--data-dir", str(data), "--defs", str(defs)]
    if kind == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
        args += ["--wal-url", url]
    else:
        url = DataLayout.at(data).wal_url
    wal = WriteAheadLog.open(url)
    wal.close()
    before = sorted(data.iterdir())
    result = CliRunner().invoke(run, args)
    assert result.exit_code == 2, result.output
    assert "unknown gateway 'nosuch'" in result.output and "known: declared" in result.output
    assert sorted(data.iterdir()) == before
    wal = WriteAheadLog.open(url)
    try:
        assert "nosuch" not in wal.gateway_ids()
    finally:
        wal.close()


def test_dev_on_a_taken_port_says_which_and_by_what(tmp_path: Path) -> None:
    with socket.socket() as taken, socket.socket() as free:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        free.bind(("127.0.0.1", 0))
        port, free_port = taken.getsockname()[1], free.getsockname()[1]
        free.close()
        data = tmp_path / "data"
        result = CliRunner().invoke(
            dev,
            [
                "--data-dir",
                str(data),
                "--gateway-port",
                str(port),
                "--dagster-port",
                str(free_port),
            ],
        )
    assert result.exit_code == 2, result.output
    assert f"Error: port {port} is already in use by pid {os.getpid()} (" in result.output
    assert "--gateway-port" in result.output and len(result.output.strip().splitlines()) == 1
    assert not data.exists()


def test_dev_checks_the_jars_in_lakesync_jar_dir(tmp_path: Path) -> None:
    jars = Path(__file__).resolve().parents[2] / "data" / "jars"  # filled by scripts/setup.sh
    data = tmp_path / "data"
    data.mkdir()
    (data / "dagster").write_text("")  # where Dagster's home should be: the stack cannot start
    result = CliRunner().invoke(
        dev,
        [
            *("--data-dir", str(data), "--clients", "0"),
            *("--gateway-port", str(free_port()), "--dagster-port", str(free_port())),
        ],
        env={ENV_JAR_DIR: str(jars)},
    )
    assert result.exit_code == 1, result.output
    assert f"jars      {len(pinned_jars()) + 1} in {jars}\n" in result.output
    assert "error: [Errno 17] File exists" in result.output and "stopped" in result.output
    assert sorted(p.name for p in data.iterdir()) == ["dagster"]  # no jars/ of its own
