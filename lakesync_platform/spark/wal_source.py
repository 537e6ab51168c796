"""Reading the WAL's ``wal_entries`` table from Spark over JDBC.

The WAL is written through :class:`lakesync_platform.wal.store.WriteAheadLog`; the flush reads
the same rows in bulk with Spark's JDBC source (parallel by cursor range), which is far faster
than paging entries through Python. The query is the WAL's own
(:func:`lakesync_platform.wal.export.export_query`); this module only runs it.
:func:`jdbc_source` translates the WAL's SQLAlchemy URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from ..core.errors import AdapterError
from ..wal.export import CURSOR_COLUMN, EXPORT_COLUMNS, export_query, ingested_ids_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "JdbcSource",
    "default_parallelism",
    "jdbc_source",
    "read_ingested_ids",
    "read_wal_entries",
]

_ROWS_PER_PARTITION = 250_000
_MIN_ROWS_PER_PARTITION = 25_000
_SPARK_TYPES = {"int64": "BIGINT", "int32": "INT", "text": "STRING"}


@dataclass(frozen=True, slots=True)
class JdbcSource:
    """A JDBC URL with its driver class and credentials."""

    url: str
    driver: str
    user: str | None = None
    password: str | None = None

    def options(self) -> dict[str, str]:
        """Spark JDBC options for this source."""
        opts = {"url": self.url, "driver": self.driver}
        if self.user is not None:
            opts["user"] = self.user
        if self.password is not None:
            opts["password"] = self.password
        return opts

    def quote_identifier(self, name: str) -> str:
        """``name`` quoted as Spark's JDBC dialect for this URL quotes it (MySQL and MariaDB:
        backticks; the others: double quotes), the quote character doubled inside."""
        mark = "`" if self.url.startswith(("jdbc:mysql:", "jdbc:mariadb:")) else '"'
        return mark + name.replace(mark, mark * 2) + mark


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks keep the session's cores busy: ``spark.default.parallelism`` from the
    session's configuration (the session factory sets it, on a classic session and on a Connect
    server alike), else ``spark.sql.shuffle.partitions``. Read from the configuration because a
    Spark Connect client has no ``SparkContext`` to ask."""
    value = spark.conf.get("spark.default.parallelism", None)
    if not value:
        value = spark.conf.get("spark.sql.shuffle.partitions", "2")
    return max(1, int(str(value)))


def jdbc_source(sqlalchemy_url: str) -> JdbcSource:
    """The JDBC equivalent of a SQLAlchemy URL (SQLite, PostgreSQL, MySQL/MariaDB)."""
    url = make_url(sqlalchemy_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise AdapterError("An in-memory SQLite database cannot be read over JDBC")
        return JdbcSource(f"jdbc:sqlite:{url.database}", "org.sqlite.JDBC")
    host = url.host or "127.0.0.1"
    if backend == "postgresql":
        port = url.port or 5432
        return JdbcSource(
            f"jdbc:postgresql://{host}:{port}/{url.database}",
            "org.postgresql.Driver",
            url.username,
            url.password,
        )
    if backend in ("mysql", "mariadb"):
        port = url.port or 3306
        return JdbcSource(
            f"jdbc:mysql://{host}:{port}/{url.database}?permitMysqlScheme",
            "org.mariadb.jdbc.Driver",
            url.username,
            url.password if url.password is not None else "",
        )
    raise AdapterError(f"No JDBC mapping for database URL backend {backend!r}")


def read_wal_entries(
    spark: SparkSession, source: JdbcSource, gw: str, after: int, up_to: int
) -> DataFrame:
    """WAL entries of ``gw`` with ``after < cursor <= up_to`` as a DataFrame.

    Columns: ``cursor, delta_id, tbl, row_id, op, client_id, hlc, columns, ingest_ms, size``.
    Large ranges are read in parallel partitions of the cursor range.
    """
    query = export_query(gw, after, up_to)
    reader = spark.read.format("jdbc").options(**source.options())
    span = max(up_to - after, 1)
    # Enough partitions to keep every core busy (also in the jobs that read the files this
    # read becomes), none smaller than _MIN_ROWS_PER_PARTITION, none above _ROWS_PER_PARTITION.
    by_size = span // _ROWS_PER_PARTITION + 1
    by_cores = min(default_parallelism(spark), span // _MIN_ROWS_PER_PARTITION)
    partitions = max(1, min(16, max(by_size, by_cores)))
    reader = reader.option("dbtable", f"({query}) wal_range").option("fetchsize", "20000")
    if partitions > 1:
        reader = (
            reader.option("partitionColumn", CURSOR_COLUMN)
            .option("lowerBound", str(after + 1))
            .option("upperBound", str(up_to + 1))
            .option("numPartitions", str(partitions))
        )
    df = reader.load()
    return df.selectExpr(
        *(f"CAST({c.name} AS {_SPARK_TYPES[c.kind]}) AS {c.name}" for c in EXPORT_COLUMNS)
    )


def read_ingested_ids(
    spark: SparkSession, source: JdbcSource, gw: str, client_id: str, after: int
) -> DataFrame:
    """The distinct ``(tbl, row_id)`` ``client_id`` wrote to ``gw`` after cursor ``after``
    (columns ``tbl, row_id``)."""
    query = ingested_ids_query(gw, client_id, after)
    df = (
        spark.read.format("jdbc")
        .options(**source.options())
        .option("dbtable", f"({query}) ingested")
        .option("fetchsize", "20000")
        .load()
    )
    return df.selectExpr("CAST(tbl AS STRING) AS tbl", "CAST(row_id AS STRING) AS row_id")
