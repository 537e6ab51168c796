"""Pipeline test fixtures: ONE session-scoped SparkSession for the whole suite.

Every test uses its own gateway id (= its own Iceberg namespace) and its own WAL file, so tests
share the session and the catalog without sharing data.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.core.delta import DELETE, ColumnDelta, RowDelta
from lakesync_platform.core.hlc import encode
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.schema import TableSchema, parse_table_schema
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .lock_holder import Holder, Waiting

REPO = Path(__file__).resolve().parents[2]

NOW_MS = 1_767_000_000_000
"""The fixed wall clock of test WALs (HLCs are stamped at or before it)."""


@pytest.fixture(scope="session")
def lake_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory of the shared Spark session (catalog.db, warehouse)."""
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="session")
def spark_settings(lake_dir: Path) -> Any:
    """Settings of the one Spark session, on the jar folder ``lakesync setup`` fills in the
    repository (``scripts/setup.sh``; filled here on first use)."""
    from lakesync_platform.spark.session import SparkSettings

    return SparkSettings(data_dir=lake_dir, jar_dir=REPO / "data" / "jars", shuffle_partitions=2)


SPARK_MODE_ENV = "LAKESYNC_TEST_SPARK"
"""``connect`` (the default): the suite's session is a Spark Connect client of a server the
suite starts, as every Dagster run and ``lakesync dev`` uses; ``local``: an in-process driver."""


@pytest.fixture(scope="session")
def spark_server(spark_settings: Any) -> Iterator[str | None]:
    """The Spark Connect server of the suite (its URL), or ``None`` in local mode."""
    if os.environ.get(SPARK_MODE_ENV, "connect") == "local":
        yield None
        return
    from lakesync_platform.spark.server import start_server, wait_for_server
    from lakesync_platform.testing import free_port

    port = free_port()
    proc = start_server(spark_settings, port, os.environ)
    url = f"sc://127.0.0.1:{port}"
    try:
        wait_for_server(url, proc, timeout_s=180)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except Exception:  # a JVM that ignores SIGTERM is killed
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def spark(spark_settings: Any, spark_server: str | None) -> Iterator[Any]:
    """The one SparkSession of the test suite (Iceberg catalog ``lakesync``): a Spark Connect
    client of :func:`spark_server`, or a local driver (``LAKESYNC_TEST_SPARK=local``)."""
    from dataclasses import replace

    from lakesync_platform.spark.session import create_spark_session

    session = create_spark_session(replace(spark_settings, remote=spark_server), env=os.environ)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lake_catalog(spark: Any) -> Any:
    """pyiceberg over the catalog the shared session writes (what the stages read snapshots
    with), from the session's own settings: a classic session's or a Connect server's."""
    from lakesync_platform.spark.session_catalog import session_catalog

    return session_catalog(spark)


@pytest.fixture
def gw() -> str:
    """A fresh gateway id (= Iceberg namespace) for one test."""
    return "gw_" + uuid.uuid4().hex[:10]


@pytest.fixture
def wal_url(tmp_path: Path) -> str:
    """URL of a fresh SQLite WAL."""
    return "sqlite:///" + str(tmp_path / "wal.db")


@pytest.fixture
def wal(wal_url: str) -> Iterator[WriteAheadLog]:
    """A fresh SQLite WAL."""
    log = WriteAheadLog.open(wal_url)
    yield log
    log.close()


@pytest.fixture
def service(wal: WriteAheadLog) -> SyncService:
    """Push/pull over the test WAL with a fixed clock."""
    return SyncService(wal, clock=lambda: NOW_MS)


TODOS = parse_table_schema(
    {
        "table": "todos",
        "columns": [
            {"name": "title", "type": "string"},
            {"name": "done", "type": "boolean"},
            {"name": "priority", "type": "number"},
            {"name": "meta", "type": "json"},
        ],
    }
)


class Pusher:
    """Builds valid deltas and pushes them through the real :class:`SyncService`."""

    def __init__(self, service: SyncService, gw: str) -> None:
        self.service = service
        self.gw = gw
        self._tick = itertools.count(1)

    def hlc(self, offset_ms: int | None = None, counter: int = 0) -> int:
        """An HLC before the fixed clock (auto-increasing unless ``offset_ms`` is given)."""
        if offset_ms is None:
            offset_ms = next(self._tick)
        return encode(NOW_MS - 1_000_000 + offset_ms, counter)

    def delta(
        self, client: str, row: str, hlc: int, table: str = "todos", op: str = "UPDATE", **cols: Any
    ) -> RowDelta:
        """A delta with a correct deltaId."""
        columns = () if op == DELETE else tuple(ColumnDelta(k, v) for k, v in cols.items())
        return RowDelta(
            op, table, row, client, columns, hlc, delta_id(client, hlc, table, row, columns)
        )

    def push(self, client: str, deltas: Sequence[RowDelta]) -> None:
        """Push as ``client`` with an admin's token: the seeder writes whatever a test needs,
        whatever the gateway's sync rules (which govern the writes of ordinary tokens)."""
        result = self.service.push(self.gw, client, deltas, any_client_ids=True)
        assert not result.refused, result.refused

    def write(self, client: str, row: str, table: str = "todos", **cols: Any) -> RowDelta:
        """Push one write with the next HLC."""
        d = self.delta(client, row, self.hlc(), table, **cols)
        self.push(client, [d])
        return d

    def delete(self, client: str, row: str, table: str = "todos") -> RowDelta:
        """Push one delete with the next HLC."""
        d = self.delta(client, row, self.hlc(), table, op=DELETE)
        self.push(client, [d])
        return d


@pytest.fixture
def pusher(service: SyncService, gw: str) -> Pusher:
    """A :class:`Pusher` for the test's gateway."""
    return Pusher(service, gw)


@pytest.fixture
def todos(wal: WriteAheadLog, gw: str) -> TableSchema:
    """The ``todos`` schema, registered in the test WAL's config store."""
    return wal.save_schema(gw, TODOS)


ExpectedRows = Callable[[], dict[str, dict[str, Any]]]


_PYSPARK_SOCKET_LEAK = "ignore:unclosed <socket.socket:ResourceWarning"


@pytest.fixture(scope="module", autouse=True)
def _collect_pyspark_leaks() -> Iterator[None]:
    """Collect garbage at the end of each pipeline module, while the filter below applies: the
    sockets pyspark leaks are otherwise collected, and reported, during a later folder's test."""
    yield
    import gc

    gc.collect()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Ignore the socket pyspark 3.5 leaks on every ``collect()`` (pipeline tests only).

    ``pyspark.rdd._create_local_socket`` returns only the socket's file object and never closes
    the socket itself; CPython then warns ``unclosed <socket.socket …>`` when it is collected.
    That is inside pyspark, not in our code, so it is ignored here, scoped to this folder.
    """
    here = str(__file__).rsplit("/", 1)[0]
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.filterwarnings(_PYSPARK_SOCKET_LEAK))


def _server_database(admin_url: str, create: str, drop: str) -> Iterator[str]:
    import sqlalchemy

    name = "lakesync_pipe_" + uuid.uuid4().hex[:10]
    engine = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(create.format(name=name))
    except sqlalchemy.exc.OperationalError as exc:  # server down: a clear skip, not a pass
        engine.dispose()
        pytest.skip(f"database server unavailable: {exc}")
    try:
        yield name
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql(drop.format(name=name))
        engine.dispose()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database (dropped afterwards)."""
    for name in _server_database(
        "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        'CREATE DATABASE "{name}"',
        'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
    ):
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    """Processes holding a lake's lock (:mod:`.lock_holder`), stopped after the test."""
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.stop()


@pytest.fixture
def waiting() -> Iterator[Waiting]:
    """The lock module's "waiting for …" warnings, as they come."""
    handler = Waiting()
    logger = logging.getLogger("lakesync_platform.pipeline.lock")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture
def mariadb_url() -> Iterator[str]:
    """A fresh MariaDB database (dropped afterwards)."""
    for name in _server_database(
        "mysql+pymysql://root:@127.0.0.1:3306/test",
        "CREATE DATABASE `{name}` CHARACTER SET utf8mb4",
        "DROP DATABASE IF EXISTS `{name}`",
    ):
        yield f"mysql+pymysql://root:@127.0.0.1:3306/{name}"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def dest_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh destination database of each supported dialect."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    if request.param == "mariadb":
        return str(request.getfixturevalue("mariadb_url"))
    return "sqlite:///" + str(tmp_path / "dest.db")


@pytest.fixture(scope="session")
def bigquery_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The BigQuery emulator, started once for the session on free ports."""
    from lakesync_platform.testing import BigQueryEmulator

    log = tmp_path_factory.mktemp("bqemulator") / "bqemulator.log"
    with BigQueryEmulator(log) as emulator:
        yield emulator


@pytest.fixture
def bigquery_dataset(bigquery_emulator: Any) -> dict[str, str]:
    """A fresh dataset name on the emulator: ``project``, ``dataset``, ``endpoint``."""
    return {
        "project": bigquery_emulator.project,
        "dataset": "ds_" + uuid.uuid4().hex[:10],
        "endpoint": bigquery_emulator.endpoint,
    }
