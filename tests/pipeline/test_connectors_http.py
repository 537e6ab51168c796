"""Jira and Salesforce connectors end to end, against the fake servers on real sockets:
declared in YAML, run by the CLI and by the Dagster job, pulled by a Python client through a
real gateway process, flushed, folded into state and materialised into PostgreSQL; an update
and a delete at each source reach the client and the destination (Jira's delete through the
Spark census); a poll killed with SIGKILL and run again leaves every record exactly once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
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
from lakesync_platform.core.schema import table_schema_to_json
from lakesync_platform.fakes.jira import FakeJira
from lakesync_platform.fakes.salesforce import FakeSalesforce
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.materialise import run_materialise
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from resources.connector_runs import CONNECTOR_JOB, CONNECTOR_PARTITIONS, connector_key
from tests.helpers import ROOT, SECRET, token

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        yield fake


@pytest.fixture
def org() -> Iterator[FakeSalesforce]:
    with FakeSalesforce(bulk_polls=0) as fake:
        yield fake


def _env(jira: FakeJira, org: FakeSalesforce) -> dict[str, str]:
    return {
        "JIRA_URL": jira.url,
        "JIRA_TOKEN": jira.token,
        "SF_URL": org.url,
        "SF_SECRET": org.client_secret,
        "SF_PASSWORD": org.password,
    }


def _tracker(jira: FakeJira, **more: Any) -> dict[str, Any]:
    options = {"domain": "acme", "email": jira.email, "apiToken": "${JIRA_TOKEN}"}
    options["baseUrl"] = "${JIRA_URL}"
    return {"name": "tracker", "type": "jira", "jira": {**options, **more}}


def _crm(org: FakeSalesforce, **more: Any) -> dict[str, Any]:
    options = {
        "instanceUrl": "${SF_URL}", "loginUrl": "${SF_URL}", "clientId": org.client_id,
        "clientSecret": "${SF_SECRET}", "username": org.username, "password": "${SF_PASSWORD}",
        "objects": ["Account"], **more,
    }  # fmt: skip
    return {"name": "crm", "type": "salesforce", "salesforce": options}


def _cli(args: list[str], lake_dir: Path, defs: Path, wal_url: str, env: dict[str, str]) -> Any:
    common = ["--data-dir", str(lake_dir), "--defs", str(defs), "--wal-url", wal_url]
    result = CliRunner().invoke(run, [*args, *common], env=env)
    assert result.exit_code == 0, result.output
    return result


def test_declared_jira_and_salesforce_reach_a_client_and_postgres_with_updates_and_deletes(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    postgres_url: str,
    jira: FakeJira,
    org: FakeSalesforce,
    tmp_path: Path,
) -> None:
    bug = jira.add_issue("ENG", "Crash", comments=["seen", "me too"])
    chore = jira.add_issue("ENG", "Chore", comments=["later"])
    acme = org.create("Account", Name="Acme", NumberOfEmployees=5)
    gone = org.create("Account", Name="Gone Inc")
    defs = tmp_path / "defs"
    defs.mkdir()
    synced = ["jira_issues", "sf_accounts"]  # the tables checked here (state is per table)
    doc = {
        "gateway": gw,
        "destinations": [{"name": "dw", "kind": "postgres", "url": postgres_url, "tables": synced}],
        "connectors": [_tracker(jira, censusEvery=2), _crm(org, censusEvery=0)],
    }
    (defs / "sources.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    env = _env(jira, org)

    def poll() -> list[str]:
        return [
            _cli(["connector", name, "--gw", gw], lake_dir, defs, wal_url, env).output
            for name in ("tracker", "crm")
        ]

    settings = PipelineSettings(data_dir=lake_dir, defs_dir=defs, env=env)
    ctx = PipelineContext(settings, spark=spark, wal=wal)

    def pipeline() -> dict[str, Any]:
        run_flush(ctx, gw)
        run_state(ctx, gw, synced)
        run_materialise(ctx, gw, tables=synced)
        engine = sqlalchemy.create_engine(postgres_url)
        with engine.connect() as conn:
            issues = conn.exec_driver_sql("SELECT row_id, summary, deleted_at FROM jira_issues")
            accounts = conn.exec_driver_sql("SELECT row_id, name, deleted_at FROM sf_accounts")
            out = {r[0]: (r[1], r[2] is not None) for r in [*issues, *accounts]}
            columns = conn.exec_driver_sql(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'jira_issues'"
            )
            if "team" in {c for (c,) in columns}:  # the custom field created between runs
                teams = conn.exec_driver_sql("SELECT row_id, team FROM jira_issues")
                out["teams"] = dict(teams.tuples().all())
        engine.dispose()
        return out

    with GatewayProcess(tmp_path / "gw", SECRET, wal_url=wal_url) as gateway:
        lines = poll()
        assert f"connector {gw}/tracker: 6 records, 6 INSERT in " in lines[0]  # 2+3+1 project
        assert f"connector {gw}/crm: 2 records, 2 INSERT in " in lines[1]
        schemas = wal.schemas(gw)
        client = create_client(
            name="reader",
            client_id="reader",
            schemas=[table_schema_to_json(schemas[t]) for t in ("jira_issues", "sf_accounts")],
            transport=HttpTransport(gateway.url, gw, token=token("reader", gw)),
            path=tmp_path / "reader.db",
            auto_sync_ms=0,
        )
        client.sync_once()
        assert client.tracker.all("jira_issues")[bug]["summary"] == "Crash"
        assert client.tracker.all("sf_accounts")[acme]["number_of_employees"] == 5
        assert pipeline() == {
            bug: ("Crash", False), chore: ("Chore", False),
            acme: ("Acme", False), gone: ("Gone Inc", False),
        }  # fmt: skip

        team = jira.add_custom_field("Team", "option")  # a new column, additively
        jira.update_issue(bug, summary="Crash on start", custom={team: "Blue"})
        jira.delete_issue(chore)  # Jira says nothing of it: the census finds it gone
        org.update("Account", acme, Name="Acme Corp")
        org.delete("Account", gone)  # queryAll returns it with IsDeleted
        lines = poll()
        # the issue and its comment, deleted by the census; the summary updated
        assert "2 DELETE, 1 UPDATE" in lines[0] and "census: 2 vanished, consistent" in lines[0]
        assert "1 DELETE, 1 UPDATE" in lines[1]
        client.sync_once()
        issues, accounts = client.tracker.all("jira_issues"), client.tracker.all("sf_accounts")
        assert sorted(issues) == [bug] and issues[bug]["summary"] == "Crash on start"
        assert "team" in wal.schemas(gw)["jira_issues"].column_names
        assert sorted(accounts) == [acme] and accounts[acme]["name"] == "Acme Corp"
        assert pipeline() == {
            bug: ("Crash on start", False), chore: ("Chore", True),
            acme: ("Acme Corp", False), gone: ("Gone Inc", True),
            "teams": {bug: "Blue", chore: None},
        }  # fmt: skip
        client.close()


def test_the_dagster_job_polls_a_connector_registered_at_runtime_and_checks_its_census(
    spark: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    wal_url: str,
    gw: str,
    org: FakeSalesforce,
    jira: FakeJira,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    org.create("Account", Name="Acme")
    lead = org.create("Lead", LastName="Lovelace", Company="Engines")
    (tmp_path / "defs").mkdir()
    settings = {"LAKESYNC_DATA_DIR": str(lake_dir), "LAKESYNC_WAL_URL": wal_url,
                "LAKESYNC_DEFS_DIR": str(tmp_path / "defs"), **_env(jira, org)}  # fmt: skip
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(settings)
    with dg.DagsterInstance.ephemeral() as instance:  # disposed: its temporary folder
        body = _crm(org, objects=["Account", "Lead"], censusEvery=1)
        wal.save_connector(gw, parse_connector_config(body))  # as the admin route does
        key = connector_key(gw, "crm")
        instance.add_dynamic_partitions(CONNECTOR_PARTITIONS.name or "", [key])
        result = defs.resolve_job_def(CONNECTOR_JOB).execute_in_process(
            instance=instance, partition_key=key
        )
        assert result.success
        [mat] = result.asset_materializations_for_node("lakesync_connectors")
        meta = {k: v.value for k, v in mat.metadata.items()}
        assert meta["records_fetched"] == 2 and meta["deltas"] == {"INSERT": 2}
        # per object: describe, COUNT() (a bulk load?), queryAll; the census: a query per object
        assert meta["api_calls"] == org.api_used == 8
        assert meta["quota"] == {"used": 8, "limit": 15_000, "share": 0.0005, "budget": 0.8}
        census = meta["census"]
        assert census["ranThisRun"] and census["last"]["sourceIds"] == 2
        [check] = result.get_asset_check_evaluations()
        assert check.check_name == "census_consistent" and check.passed
        assert check.description == (
            "census of run 1: 2 ids at the source, 0 vanished and deleted, none missing"
        )
        org.purge("Lead", lead)  # emptied from the recycle bin: only the census can tell
        again = defs.resolve_job_def(CONNECTOR_JOB).execute_in_process(
            instance=instance, partition_key=key
        )
        [mat] = again.asset_materializations_for_node("lakesync_connectors")
        assert mat.metadata["deltas"].value == {"DELETE": 1}
        assert mat.metadata["census"].value["last"]["knownIds"] == 2  # the known table, promoted
        [check] = again.get_asset_check_evaluations()
        assert check.passed and "1 vanished and deleted" in (check.description or "")
        assert [e.op for e in wal.read_entries(gw, 0)] == ["INSERT", "INSERT", "DELETE"]


def test_a_poll_killed_mid_run_and_run_again_leaves_every_record_exactly_once(
    lake_dir: Path, wal_url: str, gw: str, org: FakeSalesforce, jira: FakeJira, tmp_path: Path
) -> None:
    records = 12_000  # six pages of 2 000
    for i in range(records):
        org.create("Account", Name=f"A{i}")
    defs = tmp_path / "defs"
    defs.mkdir()
    body = _crm(org, censusEvery=0, bulkThreshold=0)
    (defs / "crm.yaml").write_text(yaml.safe_dump({"gateway": gw, "connectors": [body]}))
    env = _env(jira, org)
    WriteAheadLog.open(wal_url).close()
    db = wal_url.removeprefix("sqlite:///")
    args = ["connector", "crm", "--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakesync_platform.cli", "run", *args, "--wal-url", wal_url],
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def entries() -> int:
        with sqlite3.connect(db) as conn:
            found = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'wal_entries'")
            if not found.fetchone()[0]:
                return 0
            return int(conn.execute("SELECT count(*) FROM wal_entries").fetchone()[0])

    deadline = time.monotonic() + 120
    while entries() < 2_000 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # killed mid-run, not finished
    assert 0 < entries() < records
    _cli(["connector", "crm", "--gw", gw], lake_dir, defs, wal_url, env)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT row_id FROM wal_entries WHERE tbl = 'sf_accounts'")
        ids = [r for (r,) in rows]
    assert len(ids) == records and set(ids) == set(org.records["Account"])
