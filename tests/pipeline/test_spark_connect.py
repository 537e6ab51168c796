"""The Spark Connect server and its clients: discovery, the catalog check, local mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.core.errors import LakeSyncError
from lakesync_platform.spark.server import (
    LOCAL,
    ServerRecord,
    discover_server,
    record_path,
    resolve_remote,
    server_command,
)
from lakesync_platform.spark.session import SparkSettings, check_served_catalog, is_connect

pytestmark = pytest.mark.spark


def _record(data_dir: Path, record: ServerRecord) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    record_path(data_dir).write_text(json.dumps(asdict(record)))


def test_the_suite_runs_through_the_server_unless_told_otherwise(
    spark: Any, spark_server: str | None, spark_settings: SparkSettings
) -> None:
    assert is_connect(spark) == (spark_server is not None)
    if spark_server is None:
        pytest.skip("LAKESYNC_TEST_SPARK=local: the suite runs an in-process driver")
    served = spark.conf.get("spark.sql.catalog.lakesync.uri")
    assert served == spark_settings.resolved_catalog_uri
    assert spark.sql("SELECT 41 + 1 AS n").collect()[0]["n"] == 42


def test_a_server_of_another_lake_is_refused(
    spark: Any, spark_server: str | None, tmp_path: Path
) -> None:
    if spark_server is None:
        pytest.skip("needs the suite's Spark Connect server")
    other = SparkSettings(data_dir=tmp_path / "other", remote=spark_server)
    with pytest.raises(LakeSyncError, match="serves the catalog"):
        check_served_catalog(spark, other)


def test_discovery_finds_a_live_server_of_the_same_catalog_only(
    spark_server: str | None, spark_settings: SparkSettings, tmp_path: Path
) -> None:
    if spark_server is None:
        pytest.skip("needs the suite's Spark Connect server")
    settings = replace(spark_settings, data_dir=tmp_path / "lake")
    assert discover_server(settings) is None  # no record
    pid = os.getpid()  # a live process; the port is the suite's server
    good = ServerRecord(spark_server, pid, settings.resolved_catalog_uri, 0)
    _record(settings.data_dir, good)
    assert discover_server(settings) == good
    assert resolve_remote(None, settings) == spark_server
    assert resolve_remote(LOCAL, settings) is None  # forced local
    assert resolve_remote("sc://10.0.0.1:15002", settings) == "sc://10.0.0.1:15002"
    # Another lake's catalog, a dead process, a port nobody answers: all ignored.
    _record(settings.data_dir, replace(good, catalog_uri="jdbc:sqlite:/elsewhere/catalog.db"))
    assert discover_server(settings) is None
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    _record(settings.data_dir, replace(good, pid=int(dead.stdout)))
    assert discover_server(settings) is None
    _record(settings.data_dir, replace(good, url="sc://127.0.0.1:1"))
    assert discover_server(settings) is None
    record_path(settings.data_dir).write_text("{not json")
    assert discover_server(settings) is None


def test_a_malformed_remote_is_a_clear_error(spark_settings: SparkSettings) -> None:
    with pytest.raises(LakeSyncError, match="not a Spark Connect URL"):
        resolve_remote("http://127.0.0.1:15002", spark_settings)


def test_the_server_runs_with_the_in_process_session_configuration(
    spark_settings: SparkSettings,
) -> None:
    cmd, env = server_command(spark_settings, 15999, os.environ)
    assert cmd[0].endswith("bin/spark-submit")
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in cmd
    confs = dict(cmd[i + 1].split("=", 1) for i, part in enumerate(cmd) if part == "--conf")
    expected = spark_settings.spark_conf()
    for key in ("spark.sql.catalog.lakesync.uri", "spark.sql.extensions", "spark.driver.memory"):
        assert confs[key] == expected[key]
    assert confs["spark.connect.grpc.binding.port"] == "15999"
    assert "spark-connect_2.12" in confs["spark.jars"]
    assert env["SPARK_HOME"].endswith("pyspark")


_CLIENT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
name = f"lakesync.{sys.argv[2]}.t"
spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lakesync.{sys.argv[2]}")
spark.sql(f"CREATE TABLE IF NOT EXISTS {name} (id bigint) USING iceberg")
spark.sql(f"INSERT INTO {name} VALUES ({sys.argv[3]})")
print(spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"])
"""


def test_one_client_after_another_writes_the_embedded_catalog(
    spark: Any, spark_server: str | None, gw: str
) -> None:
    """Each client is a session of its own on the server, with a JDBC catalog of its own over
    the one SQLite file: none may leave a lock behind that fails the next one's commit
    (Iceberg 1.10's JDBC catalog left a read open per session; 1.11 closes it)."""
    if spark_server is None:
        pytest.skip("needs the suite's Spark Connect server")
    for n in range(1, 4):
        done = subprocess.run(
            [sys.executable, "-c", _CLIENT, spark_server, gw, str(n)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == str(n)
    spark.sql(f"INSERT INTO lakesync.{gw}.t VALUES (4)")
    assert spark.sql(f"SELECT count(*) AS n FROM lakesync.{gw}.t").collect()[0]["n"] == 4
