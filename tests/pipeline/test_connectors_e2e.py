"""SQL connectors end to end: declared in YAML, run by the CLI and by the Dagster job, pulled
by a Python client through a real gateway process; an update and a delete at the source reach
the client; a poll killed with SIGKILL and run again leaves every row exactly once; a bad
declaration is a clear error that writes nothing; a connector registered at runtime becomes a
partition that runs, and one unregistered stops."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy
import yaml
from click.testing import CliRunner

from assets.definitions import build_definitions
from lakesync_platform.cli.run import run
from lakesync_platform.client import HttpTransport, create_client
from lakesync_platform.core.connectors import parse_connector_config
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from resources.connector_runs import CONNECTOR_JOB, CONNECTOR_PARTITIONS, connector_key
from sensors.connectors import build_connector_sensor
from tests.helpers import ROOT, SECRET, token

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ITEMS = {
    "table": "items",
    "columns": [
        {"name": "name", "type": "string"},
        {"name": "price", "type": "number"},
        {"name": "updated_at", "type": "string"},
    ],
}
ENV = {"SRC_PW": ""}


def _connector(url: str, strategy: dict[str, Any], name: str = "shop") -> dict[str, Any]:
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return {
        "name": name,
        "type": "postgres",
        "postgres": {"connectionString": f"{scheme}://{user}:${{SRC_PW}}@{host}"},
        "schedule": "*/5 * * * *",
        "ingest": {"tables": [{"table": "items", "strategy": strategy}]},
    }


def _declare(folder: Path, gw: str, connectors: list[dict[str, Any]]) -> Path:
    folder.mkdir(exist_ok=True)
    doc = {"gateway": gw, "tables": [ITEMS], "connectors": connectors}
    (folder / "shop.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


def _source(url: str, rows: int = 5) -> sqlalchemy.Engine:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE items (id INT PRIMARY KEY, name TEXT, price NUMERIC(10,2), "
            "updated_at TIMESTAMP NOT NULL)"
        )
        conn.exec_driver_sql(
            "INSERT INTO items SELECT i, 'item ' || i, i * 1.5, "
            f"TIMESTAMP '2026-01-01' + i * INTERVAL '1 second' FROM generate_series(1, {rows}) i"
        )
    return engine


def _cli(lake_dir: Path, defs: Path, wal_url: str, gw: str, name: str = "shop") -> Any:
    args = ["connector", name, "--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs)]
    return CliRunner().invoke(run, [*args, "--wal-url", wal_url], env=ENV)


def test_a_declared_connector_run_by_the_cli_reaches_a_client_with_updates_and_deletes(
    spark: Any, lake_dir: Path, wal_url: str, gw: str, postgres_url: str, tmp_path: Path
) -> None:
    source = _source(postgres_url)
    defs = _declare(tmp_path / "defs", gw, [_connector(postgres_url, {"type": "diff"})])
    with GatewayProcess(tmp_path / "gw", SECRET, wal_url=wal_url) as gateway:
        first = _cli(lake_dir, defs, wal_url, gw)
        assert first.exit_code == 0, first.output
        assert f"connector {gw}/shop: 5 records, 5 INSERT in " in first.output
        client = create_client(
            name="reader",
            client_id="reader",
            schemas=[ITEMS],
            transport=HttpTransport(gateway.url, gw, token=token("reader", gw)),
            path=tmp_path / "reader.db",
            auto_sync_ms=0,
        )
        client.sync_once()
        rows = client.tracker.all("items")
        assert sorted(rows) == ["1", "2", "3", "4", "5"]
        assert rows["2"]["name"] == "item 2" and rows["2"]["price"] == 3.0
        with source.begin() as conn:
            conn.exec_driver_sql("UPDATE items SET name = 'renamed' WHERE id = 2")
            conn.exec_driver_sql("DELETE FROM items WHERE id = 4")
        second = _cli(lake_dir, defs, wal_url, gw)
        assert second.exit_code == 0, second.output
        assert "1 DELETE, 1 UPDATE in " in second.output
        client.sync_once()
        rows = client.tracker.all("items")
        assert sorted(rows) == ["1", "2", "3", "5"] and rows["2"]["name"] == "renamed"
        client.close()
    source.dispose()


def test_a_bad_declaration_is_a_clear_error_and_writes_nothing(
    lake_dir: Path, wal: WriteAheadLog, wal_url: str, gw: str, tmp_path: Path
) -> None:
    bad = _connector("postgresql://app@db/x", {"type": "cursor"})
    defs = _declare(tmp_path / "defs", gw, [bad])
    result = _cli(lake_dir, defs, wal_url, gw)
    assert result.exit_code == 1
    assert (
        "shop.yaml: Object missing required field `cursorColumn`"
        " - at `$.connectors[0].ingest.tables[0].strategy`" in result.output
    )
    assert wal.connectors(gw) == {} and wal.schemas(gw) == {}


def test_a_poll_killed_mid_run_and_run_again_leaves_every_row_exactly_once(
    lake_dir: Path, wal_url: str, gw: str, postgres_url: str, tmp_path: Path
) -> None:
    rows = 60_000
    source = _source(postgres_url, rows)
    strategy = {"type": "cursor", "cursorColumn": "updated_at", "lookbackMs": 2000}
    defs = _declare(tmp_path / "defs", gw, [_connector(postgres_url, strategy)])
    WriteAheadLog.open(wal_url).close()  # the WAL exists before the poll (as with a gateway)
    db = wal_url.removeprefix("sqlite:///")
    args = ["connector", "shop", "--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakesync_platform.cli", "run", *args, "--wal-url", wal_url],
        env={**os.environ, **ENV, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def entries() -> int:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM wal_entries").fetchone()[0])

    deadline = time.monotonic() + 120
    while entries() < 5_000 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # killed mid-run, not finished
    partial = entries()
    assert 0 < partial < rows
    again = _cli(lake_dir, defs, wal_url, gw)
    assert again.exit_code == 0, again.output
    with sqlite3.connect(db) as conn:
        ids = [
            r for (r,) in conn.execute("SELECT row_id FROM wal_entries WHERE gateway_id = ?", (gw,))
        ]
    assert len(ids) == rows and set(ids) == {str(i) for i in range(1, rows + 1)}
    source.dispose()


def test_the_dagster_job_polls_connectors_registered_at_runtime(
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = _source(postgres_url)
    defs_dir = _declare(tmp_path / "defs", gw, [])
    env = {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_DEFS_DIR": str(defs_dir),
        **ENV,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(env)
    dg.Definitions.validate_loadable(defs)  # job, asset and sensor names do not clash
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    now = 1_800_000_000.0  # a */5 tick
    sensor = build_connector_sensor(clock=lambda: now)

    def tick(cursor: str | None = None) -> Any:
        with dg.build_sensor_context(
            instance=instance, resources=defs.resources, cursor=cursor
        ) as context:
            result = sensor(context)
        for req in result.dynamic_partitions_requests or []:
            if isinstance(req, dg.AddDynamicPartitionsRequest):
                instance.add_dynamic_partitions(CONNECTOR_PARTITIONS.name, req.partition_keys)
            else:
                for key in req.partition_keys:
                    instance.delete_dynamic_partition(CONNECTOR_PARTITIONS.name, key)
        return result

    assert tick().run_requests == []  # nothing registered yet
    # registered at runtime, as the admin route does: the next tick makes it a partition
    strategy = {"type": "cursor", "cursorColumn": "updated_at"}
    wal.save_connector(gw, parse_connector_config(_connector(postgres_url, strategy, "live")))
    key = connector_key(gw, "live")
    result = tick()
    assert [r.partition_key for r in result.run_requests] == [key]
    assert instance.get_dynamic_partitions(CONNECTOR_PARTITIONS.name) == [key]
    assert tick(cursor=str(now)).run_requests == []  # the same tick does not run twice
    run_result = defs.resolve_job_def(CONNECTOR_JOB).execute_in_process(
        instance=instance, partition_key=key
    )
    assert run_result.success
    [mat] = run_result.asset_materializations_for_node("lakesync_connectors")
    meta = mat.metadata
    assert meta["records_fetched"].value == 5
    assert meta["deltas"].value == {"INSERT": 5}
    assert meta["cursor_before"].value == {"items": {}}
    assert meta["cursor_after"].value == {
        "items": {"cursor": "2026-01-01T00:00:05", "kind": "datetime"}
    }
    assert len(wal.read_entries(gw, 0)) == 5
    wal.delete_connector(gw, "live")  # unregistered: its partition goes, nothing runs
    assert tick().run_requests == []
    assert instance.get_dynamic_partitions(CONNECTOR_PARTITIONS.name) == []
    instance.dispose()  # its temporary folder, not left to the garbage collector
    source.dispose()
