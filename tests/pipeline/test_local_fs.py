"""The lake's fork-free local filesystem: built by set-up, used by the ``lakesync`` catalog only.

The Spark tests here look inside the driver JVM (which class the catalog's FileIO resolves, what
Hadoop's permission calls do), so they need a classic in-process session: on a Spark Connect
client the JVM is the server's, out of reach, and they skip (:func:`_java_table`) — and
:func:`test_the_jvm_tests_run_on_an_in_process_driver` runs them in a pytest of their own on an
in-process driver, so CI runs them whatever the suite's session. The files' permissions and
checksums they check are also what a Connect server's catalog writes.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.install.local_fs import LOCAL_FS_CLASS, ensure_local_fs_jar
from lakesync_platform.spark.arrow import is_connect
from lakesync_platform.spark.session import SparkSettings


def test_the_jar_is_built_once_per_source_and_replaces_older_builds(tmp_path: Path) -> None:
    stale = tmp_path / "lakesync-local-fs-000000000000.jar"
    stale.write_bytes(b"an older build")
    jar = ensure_local_fs_jar(tmp_path, os.environ)
    assert jar is not None and jar.exists() and jar.parent == tmp_path
    assert not stale.exists()
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert "io/lakesync/platform/hadoop/NoForkLocalFileSystem.class" in names
    assert "io/lakesync/platform/hadoop/NoForkLocalFileSystem$Raw.class" in names
    stamp = jar.stat().st_mtime_ns
    assert ensure_local_fs_jar(tmp_path, os.environ) == jar and jar.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == [jar.name]  # no build leftovers


def test_without_javac_the_lake_keeps_hadoops_filesystem(tmp_path: Path) -> None:
    no_jdk = {"PATH": str(tmp_path / "missing")}  # no JAVA_HOME, nothing on PATH
    assert ensure_local_fs_jar(tmp_path, no_jdk) is None
    assert list(tmp_path.iterdir()) == []
    settings = SparkSettings(data_dir=tmp_path)
    key = "spark.sql.catalog.lakesync.hadoop.fs.file.impl"
    assert key not in settings.spark_conf(local_fs=False)
    assert settings.spark_conf(local_fs=True)[key] == LOCAL_FS_CLASS
    off = SparkSettings(data_dir=tmp_path, fork_free_local_fs=False)
    assert key not in off.spark_conf(local_fs=True)


def _java_table(spark: Any, qualified: str) -> Any:
    """The ``org.apache.iceberg.Table`` behind a Spark name, through the driver JVM (classic
    sessions only: the test skips on a Spark Connect client)."""
    if is_connect(spark):
        pytest.skip("inspects the driver JVM: needs a classic in-process Spark session")
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, qualified
    )


def _catalog_fs(table: Any) -> Any:
    """The Hadoop FileSystem the ``lakesync`` catalog's FileIO resolves for an Iceberg table."""
    return table.io().newInputFile(table.location()).getFileSystem()


@pytest.mark.spark
def test_the_catalog_writes_through_it_and_the_session_does_not(
    spark: Any, gw: str, tmp_path: Path
) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lakesync.{gw}")
    spark.sql(f"CREATE TABLE lakesync.{gw}.t (id INT, name STRING) USING iceberg")
    spark.sql(f"INSERT INTO lakesync.{gw}.t VALUES (1, 'a'), (2, 'b')")
    assert sorted(tuple(r) for r in spark.table(f"lakesync.{gw}.t").collect()) == [
        (1, "a"),
        (2, "b"),
    ]
    table = _java_table(spark, f"lakesync.{gw}.t")
    fs = _catalog_fs(table)
    assert fs.getClass().getName() == LOCAL_FS_CLASS
    assert fs.getScheme() == "file"
    jvm = spark._jvm
    # Plain ``file:`` I/O of the session keeps the class Spark picks (Hive's proxy of Hadoop's).
    default = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri()).getFileSystem(
        spark._jsc.hadoopConfiguration()
    )
    assert default.getClass().getName() != LOCAL_FS_CLASS
    assert jvm.org.apache.hadoop.fs.LocalFileSystem._java_lang_class.isInstance(default)
    # The files it wrote carry Hadoop's permissions (0644 files, umask 022), with checksums.
    data = list(Path(table.location().removeprefix("file:")).rglob("*.parquet"))
    assert data
    for path in data:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert path.with_name(f".{path.name}.crc").exists()


@pytest.mark.spark
def test_set_permission_sets_what_hadoop_asks(spark: Any, gw: str, tmp_path: Path) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lakesync.{gw}")
    spark.sql(f"CREATE TABLE lakesync.{gw}.p (id INT) USING iceberg")
    fs = _catalog_fs(_java_table(spark, f"lakesync.{gw}.p"))
    jvm = spark._jvm
    target = tmp_path / "f"
    target.write_text("x")
    for mode in (0o600, 0o640, 0o751, 0o000, 0o777):
        fs.setPermission(
            jvm.org.apache.hadoop.fs.Path(target.as_uri()),
            jvm.org.apache.hadoop.fs.permission.FsPermission(mode),
        )
        assert stat.S_IMODE(os.stat(target).st_mode) == mode, oct(mode)
    # The sticky bit, which java.nio cannot set, goes Hadoop's way.
    folder = tmp_path / "d"
    folder.mkdir()
    fs.setPermission(
        jvm.org.apache.hadoop.fs.Path(folder.as_uri()),
        jvm.org.apache.hadoop.fs.permission.FsPermission(0o1777),
    )
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o1777


@pytest.mark.spark
@pytest.mark.slow
def test_the_jvm_tests_run_on_an_in_process_driver(spark_server: str | None) -> None:
    """On the suite's Spark Connect server the two tests above cannot reach the driver JVM and
    skip; here they run in a pytest of their own on an in-process driver
    (``LAKESYNC_TEST_SPARK=local``), so CI runs them either way."""
    if spark_server is None:
        pytest.skip("the suite runs on an in-process driver: the tests above ran themselves")
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED",)}
    env["LAKESYNC_TEST_SPARK"] = "local"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "catalog_writes_through_it or set_permission"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
