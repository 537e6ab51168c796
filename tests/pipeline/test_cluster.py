"""The pipeline on a Spark standalone cluster whose executors share nothing with the driver but
the network (ARCHITECTURE.md §6, §8; docs/deploy.md).

A real master and two workers start from pyspark's own ``bin/spark-class`` on loopback. Each
worker runs in a mount namespace of its own in which the repository's jar folder and the
driver's folders are empty, as on another host: the jars reach the executors through Spark
(``spark.jars``, served by the driver), the WAL is read over JDBC from PostgreSQL, the catalog
is PostgreSQL and the warehouse a bucket (moto's S3 server). The driver is a Spark Connect
server (``lakesync spark-server``, as docker-compose.yml runs it) on the cluster, and
``lakesync run sync`` runs flush → state → materialise as its thin client, in a subprocess;
the same command runs the same WAL on the suite's session, and the two lakes and
destinations must hold the same rows.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakesync_platform.cli.run import run
from lakesync_platform.pipeline.context import cluster_warnings, spark_settings
from lakesync_platform.settings import (
    ENV_CATALOG_URI,
    ENV_DATA_DIR,
    ENV_DEFS_DIR,
    ENV_JAR_DIR,
    ENV_SPARK_CORES_MAX,
    ENV_SPARK_DRIVER_HOST,
    ENV_SPARK_EXECUTOR_CORES,
    ENV_SPARK_EXECUTOR_MEMORY,
    ENV_SPARK_MASTER,
    ENV_SPARK_REMOTE,
    ENV_WAL_URL,
    ENV_WAREHOUSE,
    PipelineSettings,
)
from lakesync_platform.spark.server import wait_for_server
from lakesync_platform.spark.session import catalog_sqlalchemy_url, pyiceberg_catalog
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import S3Server, free_port
from lakesync_platform.testing_cluster import SparkMaster, SparkWorker, can_hide_paths
from lakesync_platform.wal.store import WriteAheadLog

from .conftest import NOW_MS, REPO, Pusher

JAR_DIR = REPO / "data" / "jars"


# ---------------------------------------------------------------- settings (no cluster)


def test_a_cluster_master_gets_the_executor_settings_and_local_mode_does_not() -> None:
    env = {
        ENV_SPARK_MASTER: "spark://master:7077",
        ENV_SPARK_EXECUTOR_MEMORY: "3g",
        ENV_SPARK_EXECUTOR_CORES: "2",
        ENV_SPARK_CORES_MAX: "8",
        ENV_SPARK_DRIVER_HOST: "10.0.0.5",
        ENV_WAREHOUSE: "s3://lake/warehouse",
    }
    conf = spark_settings(PipelineSettings.from_env(env, data_dir="d")).spark_conf()
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.executor.cores"] == "2"
    assert conf["spark.cores.max"] == "8"
    assert conf["spark.driver.host"] == "10.0.0.5"
    assert "spark.driver.bindAddress" not in conf and "spark.ui.enabled" not in conf
    defaults = spark_settings(
        PipelineSettings.from_env({ENV_SPARK_MASTER: "spark://m:7077"}, data_dir="d")
    ).spark_conf()
    assert defaults["spark.executor.memory"] == "1g"  # Spark's own default, stated
    assert not {"spark.executor.cores", "spark.cores.max", "spark.driver.host"} & set(defaults)
    local = spark_settings(PipelineSettings.from_env(env | {ENV_SPARK_MASTER: ""}, data_dir="d"))
    assert not [k for k in local.spark_conf() if k.startswith(("spark.executor.", "spark.cores"))]
    assert local.spark_conf()["spark.driver.host"] == "127.0.0.1"


def test_bad_executor_settings_are_refused_with_the_variable_named() -> None:
    for name, value in [
        (ENV_SPARK_EXECUTOR_MEMORY, "lots"),
        (ENV_SPARK_EXECUTOR_CORES, "0"),
        (ENV_SPARK_CORES_MAX, "two"),
    ]:
        with pytest.raises(ValueError, match=name):
            PipelineSettings.from_env({name: value})


def test_the_catalog_user_may_sit_in_its_jdbc_url() -> None:
    """As docker-compose.yml passes it: the JDBC driver reads ``user``/``password`` from the
    URL, and pyiceberg and the lake's lock connect with the same ones."""
    uri = "jdbc:postgresql://db:5432/lake?user=lakesync&password=p%40ss"
    settings = spark_settings(PipelineSettings.from_env({ENV_CATALOG_URI: uri}, data_dir="d"))
    assert catalog_sqlalchemy_url(settings) == "postgresql+psycopg://lakesync:p%40ss@db:5432/lake"
    bare = replace(settings, catalog_uri="jdbc:postgresql://db/lake", catalog_user="u")
    assert catalog_sqlalchemy_url(bare) == "postgresql+psycopg://u@db/lake"


def test_the_dagster_resource_points_its_runs_at_the_cluster_too() -> None:
    from resources.lakesync import LakeSyncResource

    resource = LakeSyncResource(spark_master="spark://master:7077", warehouse="s3://lake/w")
    conf = spark_settings(resource.settings()).spark_conf()
    assert conf["spark.executor.memory"] == "1g"
    assert spark_settings(resource.settings()).master == "spark://master:7077"


def test_what_executors_elsewhere_cannot_reach_is_said_before_spark_starts() -> None:
    cluster = {ENV_SPARK_MASTER: "spark://master:7077"}
    local_lake = PipelineSettings.from_env(cluster, data_dir="/srv/lake")
    warnings = cluster_warnings(local_lake)
    assert len(warnings) == 2
    assert "file:///srv/lake/warehouse" in warnings[0] and "s3://" in warnings[0]
    assert "sqlite:////srv/lake/wal.db" in warnings[1] and "postgresql://" in warnings[1]
    shared = PipelineSettings.from_env(
        cluster | {ENV_WAREHOUSE: "s3://lake/w", ENV_WAL_URL: "postgresql+psycopg://db/wal"}
    )
    assert cluster_warnings(shared) == []
    assert cluster_warnings(PipelineSettings.from_env({}, data_dir="/srv/lake")) == []


# ---------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    """A master, two workers blind to ``hidden``, and the folder the driver may use."""

    master: SparkMaster
    workers: list[SparkWorker]
    driver_root: Path


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not can_hide_paths():
        pytest.skip("needs a mount namespace (root and unshare) to hide the driver's disk")
    driver_root = tmp_path_factory.mktemp("cluster-driver")
    root = tmp_path_factory.mktemp("cluster")
    master = SparkMaster(root / "master")
    workers = [
        SparkWorker(master, root / f"worker{i}", memory="512m", hide=[JAR_DIR, driver_root])
        for i in range(2)
    ]
    try:
        master.start()
        threads = [threading.Thread(target=w.start) for w in workers]
        for th in threads:
            th.start()
        for th in threads:
            th.join(90)
        assert all(w.registered() for w in workers), "a worker did not register"
        yield Cluster(master, workers, driver_root)
    finally:
        for w in workers:
            w.stop()
        master.stop()


def _declare(defs: Path, gw: str) -> None:
    defs.mkdir(parents=True)
    (defs / "todos.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n"
        "  - table: todos\n"
        "    columns: [{name: title, type: string}, {name: done, type: boolean},\n"
        "              {name: priority, type: number}]\n"
        "destinations:\n"
        "  - {name: out, kind: sqlite, url: 'sqlite:///${OUT_DIR}/out.db'}\n"
    )


def _write(pusher: Pusher) -> None:
    """Inserts, per-column conflicts between two clients, deletes and a resurrection."""
    for i in range(24):
        pusher.write("alice", f"r{i}", title=f"todo {i}", done=False, priority=i % 3)
    for i in range(0, 24, 3):
        pusher.write("bob", f"r{i}", done=True)
    for i in range(1, 24, 5):
        pusher.delete("bob", f"r{i}")
    pusher.write("alice", "r1", title="back again")


def _destination(out: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(out / "out.db") as conn:
        return conn.execute(
            "SELECT row_id, title, done, priority FROM todos ORDER BY row_id"
        ).fetchall()


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Comparable rows (``ingest_ts`` is left out: Spark and pyiceberg hand timestamps over
    in different time zones; ``ingest_ms`` holds the same instant)."""
    return sorted(tuple(sorted((k, v) for k, v in r.items() if k != "ingest_ts")) for r in rows)


@pytest.mark.spark
@pytest.mark.postgres
def test_the_sync_job_on_a_standalone_cluster_equals_the_local_run(
    cluster: Cluster,
    spark: Any,
    lake_dir: Path,
    postgres_url: str,
    gw: str,
) -> None:
    wal = WriteAheadLog.open(postgres_url)
    try:
        _write(Pusher(SyncService(wal, clock=lambda: NOW_MS), gw))
    finally:
        wal.close()
    driver = cluster.driver_root
    defs = driver / "defs"
    _declare(defs, gw)
    local_out, cluster_out = driver / "local", driver / "cluster"
    local_out.mkdir()
    cluster_out.mkdir()

    # The cluster, in a subprocess: only settings differ from the local run below, which runs
    # meanwhile on the suite's session (local[*], its SQLite catalog and file warehouse).
    database = postgres_url.rsplit("/", 1)[1]
    with S3Server() as s3:
        s3.create_bucket("lake")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "AWS_"))}
        env |= s3.env | {
            ENV_DATA_DIR: str(driver / "data"),
            ENV_DEFS_DIR: str(defs),
            ENV_JAR_DIR: str(JAR_DIR),
            ENV_WAL_URL: postgres_url,
            ENV_CATALOG_URI: f"jdbc:postgresql://127.0.0.1:5432/{database}?user=postgres",
            ENV_WAREHOUSE: "s3://lake/warehouse",
            ENV_SPARK_MASTER: cluster.master.url,
            ENV_SPARK_EXECUTOR_MEMORY: "512m",
            ENV_SPARK_DRIVER_HOST: "127.0.0.1",
            "OUT_DIR": str(cluster_out),
        }
        (driver / "data").mkdir()
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "lakesync_platform.cli", "spark-server", "--port", str(port)],
            env=env,
            cwd=driver,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        command = [sys.executable, "-m", "lakesync_platform.cli", "run", "sync", "--gw", gw]
        try:
            wait_for_server(f"sc://127.0.0.1:{port}", None, timeout_s=180)
            remote = subprocess.Popen(
                [*command, "--json"],
                env=env | {ENV_SPARK_REMOTE: f"sc://127.0.0.1:{port}"},
                cwd=driver,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                args = ["sync", "--gw", gw, "--data-dir", str(lake_dir), "--defs", str(defs)]
                local = CliRunner().invoke(
                    run,
                    [*args, "--json"],
                    env={
                        ENV_WAL_URL: postgres_url,
                        "OUT_DIR": str(local_out),
                        ENV_SPARK_MASTER: None,
                    },
                )
                out, err = remote.communicate(timeout=300)
            finally:
                if remote.poll() is None:
                    remote.kill()
                    remote.wait()
            # The server's app on the master ends with the server (SIGTERM, as a service
            # manager stops it).
            server.terminate()
            server_out, _ = server.communicate(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        assert f"sc://127.0.0.1:{port} ready" in server_out, server_out[-4000:]
        assert local.exit_code == 0, local.output
        local_doc = json.loads(local.stdout)
        assert remote.returncode == 0, err[-4000:]
        remote_doc = json.loads(out)
        settings = PipelineSettings.from_env(env)
        lake = pyiceberg_catalog(spark_settings(settings))
        try:
            remote_log = lake.load_table((gw, "lakesync_deltas")).scan().to_arrow().to_pylist()
            remote_state = lake.load_table((gw, "todos")).scan().to_arrow().to_pylist()
            assert lake.load_table((gw, "todos")).location().startswith("s3://lake/warehouse/")
        finally:
            lake.engine.dispose()  # type: ignore[attr-defined]

    # Same run, same results: what each stage reported, the lake's log and state, the
    # destination's rows.
    def figures(doc: dict[str, Any]) -> list[dict[str, Any]]:
        # Timings, sizes and snapshot ids (random per lake) differ between any two runs.
        drop = {"seconds", "lake_bytes"}
        return [
            {k: v for k, v in r.items() if k not in drop and not k.endswith("snapshot_id")}
            for r in doc["results"]
        ]

    assert remote_doc["ok"] and figures(remote_doc) == figures(local_doc)
    assert [r["kind"] for r in remote_doc["results"]] == ["flush", "state", "materialise"]
    local_log = [r.asDict() for r in spark.table(f"lakesync.{gw}.lakesync_deltas").collect()]
    local_state = [r.asDict() for r in spark.table(f"lakesync.{gw}.todos").collect()]
    assert len(remote_log) == remote_doc["results"][0]["entries"] == 38
    assert _rows(remote_log) == _rows(local_log)
    assert _rows(remote_state) == _rows(local_state)
    assert _destination(cluster_out) == _destination(local_out)
    assert len(_destination(cluster_out)) == 20  # 24 rows, 5 deleted, 1 back

    # The master ran it, on both workers' executors, which fetched the jars from the driver
    # and saw nothing of its disk.
    state = cluster.master.state()
    [app] = state["completedapps"]
    assert app["state"] == "FINISHED" and app["cores"] == 2 and state["activeapps"] == []
    for worker in cluster.workers:
        assert worker.sees(JAR_DIR) == [] and worker.sees(driver) == []
        jars = worker.fetched_jars()
        assert any(j.startswith("iceberg-spark-runtime") for j in jars), jars
        assert any(j.startswith("postgresql") for j in jars), jars
