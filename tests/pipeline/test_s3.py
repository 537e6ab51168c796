"""The Iceberg warehouse in S3-compatible object storage (moto's S3 server on loopback).

The shared Spark session's catalog writes to local disk, and Spark allows one session per
process, so the S3 round trip runs the pipeline in one subprocess configured the way a user
configures it: ``LAKESYNC_WAREHOUSE=s3://…`` and the standard ``AWS_*`` variables. It also writes a
checkpoint, which lands in the bucket and a gateway configured the same way serves from there.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync_platform.client import GatewayConfig, create_client
from lakesync_platform.client._wire import read_frames
from lakesync_platform.core.proto import decode_sync_response
from lakesync_platform.pipeline.context import spark_settings
from lakesync_platform.settings import ENV_WAREHOUSE, ObjectStoreSettings, PipelineSettings
from lakesync_platform.spark.session import S3_FILE_IO, S3Access, SparkSettings, pyiceberg_catalog
from lakesync_platform.testing import GatewayProcess, S3Server
from tests.helpers import SECRET, token

from .conftest import REPO, Pusher

_PIPELINE = """
import json, os, sys
from lakesync_platform.pipeline.checkpoint import run_checkpoint
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.materialise import run_materialise
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.pipeline.upkeep import run_expiry
from lakesync_platform.settings import PipelineSettings

gw = sys.argv[1]
ctx = PipelineContext(PipelineSettings.from_env(os.environ))
try:
    ctx.apply_declarations()
    flushed = run_flush(ctx, gw)
    run_state(ctx, gw)
    run_materialise(ctx, gw)
    checkpoint = run_checkpoint(ctx, gw)
    notes = ctx.spark.table(f"lakesync.{gw}.notes").orderBy("id").collect()
    orphans = sum(r.orphans_removed for r in run_expiry(ctx, gw))  # listed through S3FileIO
    print(
        json.dumps(
            {
                "notes": [row.asDict() for row in notes],
                "orphans": orphans,
                "checkpoint": checkpoint.cursor,
            }
        )
    )
finally:
    ctx.close()
"""


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """One local S3 server for this module."""
    with S3Server() as server:
        yield server


def test_the_object_store_settings_are_the_standard_aws_variables() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://general:9000",
        "AWS_ENDPOINT_URL_S3": "https://s3-only:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    store = ObjectStoreSettings.from_env(env)
    assert store == ObjectStoreSettings("https://s3-only:9000", "eu-west-1", "id", "secret")
    assert ObjectStoreSettings.from_env({**env, "AWS_REGION": "auto"}).region == "auto"
    assert ObjectStoreSettings.from_env({}) == ObjectStoreSettings()
    settings = PipelineSettings.from_env({**env, ENV_WAREHOUSE: "s3://b/lake"}, data_dir="d")
    conf = spark_settings(settings).spark_conf()
    cat = "spark.sql.catalog.lakesync"
    assert conf[f"{cat}.warehouse"] == "s3://b/lake"
    assert conf[f"{cat}.io-impl"] == S3_FILE_IO
    assert conf[f"{cat}.s3.endpoint"] == "https://s3-only:9000"
    assert conf[f"{cat}.s3.path-style-access"] == "true"
    assert conf[f"{cat}.client.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://s3-only:9000"
    assert "spark.hadoop.fs.s3a.connection.ssl.enabled" not in conf  # https stays on
    assert f"{cat}.hadoop.fs.file.impl" not in spark_settings(settings).spark_conf(local_fs=True)


def test_on_aws_itself_nothing_is_forced() -> None:
    """Without an endpoint or keys, the AWS SDKs' own lookup (profiles, roles) decides."""
    conf = SparkSettings(Path("d"), warehouse="s3://b/lake", s3=S3Access()).spark_conf()
    assert not [k for k in conf if ".s3." in k or "fs.s3a." in k]
    assert conf["spark.sql.catalog.lakesync.io-impl"] == S3_FILE_IO


@pytest.mark.spark
def test_flush_state_materialise_with_the_warehouse_in_a_bucket(
    s3: S3Server, wal_url: str, gw: str, pusher: Pusher, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.fs as pafs

    bucket = f"lake-{gw.replace('_', '-')}"
    s3.create_bucket(bucket)
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "t.yaml").write_text(
        f"gateway: {gw}\n"
        "tables:\n"
        "  - {table: todos, columns: [{name: title, type: string}, {name: done, type: boolean}]}\n"
        "destinations:\n"
        f"  - {{name: out, kind: sqlite, url: 'sqlite:///{tmp_path}/out.db'}}\n"
    )
    pusher.write("a", "r1", title="hello", done=False)
    pusher.write("b", "r2", title="bye", done=True)
    pusher.write("b", "r1", done=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "AWS_"))},
        **s3.env,
        "LAKESYNC_DATA_DIR": str(tmp_path / "data"),
        "LAKESYNC_DEFS_DIR": str(defs),
        "LAKESYNC_WAL_URL": wal_url,
        "LAKESYNC_JAR_DIR": str(REPO / "data" / "jars"),
        ENV_WAREHOUSE: f"s3://{bucket}/warehouse",
        "PYTHONPATH": str(REPO),
    }
    settings = PipelineSettings.from_env(env)
    settings.data_dir.mkdir()
    catalog = pyiceberg_catalog(spark_settings(settings))
    # pyiceberg writes a table into the bucket first; the Spark job reads it below.
    catalog.create_namespace(gw)
    notes = pa.table({"id": pa.array([1, 2], pa.int64()), "text": ["from", "pyiceberg"]})
    catalog.create_table((gw, "notes"), schema=notes.schema).append(notes)

    store = pafs.S3FileSystem(
        endpoint_override=s3.endpoint,
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
    )
    junk = f"{bucket}/warehouse/{gw}/lakesync_deltas/data/left-by-a-crashed-writer.parquet"
    with store.open_output_stream(junk) as out:  # an orphan upkeep removes (age 0 here)
        out.write(b"not referenced")
    env["LAKESYNC_ORPHAN_AGE_SECONDS"] = "0"
    result = subprocess.run(
        [sys.executable, "-c", _PIPELINE, gw],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    spark_read = json.loads(result.stdout.strip().splitlines()[-1])
    assert spark_read["notes"] == [{"id": 1, "text": "from"}, {"id": 2, "text": "pyiceberg"}]
    assert spark_read["orphans"] == 1
    assert store.get_file_info(junk).type == pafs.FileType.NotFound

    # Spark wrote the log and the state into the bucket; pyiceberg reads the same tables.
    log = catalog.load_table((gw, "lakesync_deltas"))
    assert log.location() == f"s3://{bucket}/warehouse/{gw}/lakesync_deltas"
    assert log.scan().to_arrow().num_rows == 3
    state = catalog.load_table((gw, "todos")).scan().to_arrow().to_pylist()
    assert {r["row_id"]: (r["title"], r["done"]) for r in state} == {
        "r1": ("hello", True),
        "r2": ("bye", True),
    }
    with sqlite3.connect(tmp_path / "out.db") as conn:
        rows = conn.execute("SELECT row_id, title, done FROM todos ORDER BY row_id").fetchall()
    assert rows == [("r1", "hello", 1), ("r2", "bye", 1)]

    files = store.get_file_info(pafs.FileSelector(f"{bucket}/warehouse/{gw}", recursive=True))
    parquet = [f.path for f in files if f.path.endswith(".parquet")]
    assert any("/lakesync_deltas/data/" in p for p in parquet)
    assert any("/todos/data/" in p for p in parquet)
    assert not (tmp_path / "data" / "warehouse").exists()  # nothing went to local disk

    # The checkpoint went to the bucket beside the warehouse; a gateway configured the same way
    # serves it from there, and a new client bootstraps from it.
    assert spark_read["checkpoint"] == 3
    checkpoints = store.get_file_info(
        pafs.FileSelector(f"{bucket}/warehouse/_checkpoints/{gw}", recursive=True)
    )
    assert {"manifest.json", "manifest-3.json", "chunk-3-000.bin"} <= {
        f.base_name for f in checkpoints
    }
    assert not (tmp_path / "data" / "checkpoints").exists()
    served_env = {**s3.env, ENV_WAREHOUSE: f"s3://{bucket}/warehouse"}
    with GatewayProcess(tmp_path / "gw", SECRET, wal_url=wal_url, env=served_env) as gateway:
        status, body = gateway.request("GET", f"/v1/sync/{gw}/checkpoint", token=token("ts", gw))
        assert status == 200
        (frame,) = read_frames([body])
        pairs = decode_sync_response(frame)[0]  # the TS client's encoding: DELETE@0, INSERT
        assert [d.op for d in pairs] == ["DELETE", "INSERT"] * 2
        assert {d.row_id for d in pairs} == {"r1", "r2"}
        client = create_client(
            name="s3",
            schemas=[
                {
                    "table": "todos",
                    "columns": [
                        {"name": "title", "type": "string"},
                        {"name": "done", "type": "boolean"},
                    ],
                }
            ],
            client_id="py",
            gateway=GatewayConfig(gateway.url, gw, token=token("py", gw)),
            path=tmp_path / "client.db",
            auto_sync_ms=0,
        )
        try:
            assert client.sync_once().pulled == 2  # both from the checkpoint, none paged
            assert client.coordinator.cursor == 3
            assert {k: (v["title"], v["done"]) for k, v in client.tracker.all("todos").items()} == {
                "r1": ("hello", True),
                "r2": ("bye", True),
            }
        finally:
            client.close()
