"""pyiceberg over the very catalog a Spark session writes, read from the session's configuration.

The pipeline reads snapshot metadata with pyiceberg (:mod:`.snapshots`). Those reads must see
the catalog the session commits to — which is configured where the session was made: in this
process for a classic session, on the server for a Spark Connect one (its catalog settings are
static there). So the catalog is built from the session's own ``spark.sql.catalog.lakesync.*``
settings (a few configuration reads, once per pipeline context), not from settings that could
name another lake: a context given a session made elsewhere (a test's shared session, a
Connect server) still reads what that session writes. The URI must be one pyiceberg translates
(SQLite or PostgreSQL, :func:`~lakesync_platform.spark.session.catalog_sqlalchemy_url`) and, for
SQLite, a path this process can open — true of the embedded lake and of a server on this host.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .session import CATALOG, S3Access, SparkSettings, pyiceberg_catalog

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

__all__ = ["session_catalog", "session_catalog_settings"]

_PREFIX = f"spark.sql.catalog.{CATALOG}"


def session_catalog_settings(spark: SparkSession) -> SparkSettings:
    """The catalog part of the settings the session was made with (its URI, credentials,
    warehouse and S3 access); the rest are defaults."""

    def conf(key: str) -> str | None:
        value = spark.conf.get(f"{_PREFIX}.{key}", None)
        return None if value in (None, "") else str(value)

    uri, warehouse = conf("uri"), conf("warehouse")
    if uri is None or warehouse is None:
        raise ValueError(f"the Spark session has no Iceberg catalog {CATALOG!r} configured")
    s3 = S3Access()
    if conf("io-impl") is not None:
        s3 = S3Access(
            endpoint=conf("s3.endpoint"),
            region=conf("client.region"),
            access_key_id=conf("s3.access-key-id"),
            secret_access_key=conf("s3.secret-access-key"),
            session_token=conf("s3.session-token"),
        )
    return SparkSettings(
        data_dir=Path("."),
        catalog_uri=uri,
        catalog_user=conf("jdbc.user"),
        catalog_password=conf("jdbc.password"),
        warehouse=warehouse,
        s3=s3,
    )


def session_catalog(spark: SparkSession) -> Catalog:
    """pyiceberg over the catalog ``spark`` writes (:func:`session_catalog_settings`)."""
    return pyiceberg_catalog(session_catalog_settings(spark))
