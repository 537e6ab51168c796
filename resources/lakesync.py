"""The Dagster resource that gives assets and sensors the LakeSync pipeline.

Settings arrive as resource config (wired to ``EnvVar``s in :mod:`assets.definitions`); the
resource builds a :class:`~lakesync_platform.pipeline.context.PipelineContext` on first use in
the run process — the Spark session only when a stage actually needs it, so sensors never start
one — and closes it when the run or sensor tick ends.

The session is ``dagster-pyspark``'s :class:`~dagster_pyspark.LazyPySparkResource` with the
``spark.remote`` setting: a thin Spark Connect client of the server ``lakesync dev`` (or
``lakesync spark-server``) runs, created on first use. Without a server (``spark_remote`` =
``local``, or none recorded in the data directory) a run starts an in-process driver through
:func:`~lakesync_platform.spark.session.create_spark_session` instead: that needs the jar folder
filled and Java found for the launch, which ``dagster-pyspark``'s builder does not do.
"""

import os
from dataclasses import replace
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr

from lakesync_platform.pipeline.context import PipelineContext, spark_settings
from lakesync_platform.settings import (
    DEFAULT_DATA_DIR,
    DEFAULT_DEFS_DIR,
    DEFAULT_SPARK_MASTER,
    ENV_CATALOG_URI,
    ENV_JAR_DIR,
    ENV_SPARK_MASTER,
    ENV_SPARK_REMOTE,
    ENV_WAREHOUSE,
    PipelineSettings,
)
from lakesync_platform.spark.server import resolve_remote
from lakesync_platform.spark.session import check_served_catalog, create_spark_session
from lakesync_platform.wal.store import WriteAheadLog

__all__ = ["LakeSyncResource"]


class LakeSyncResource(dg.ConfigurableResource):  # type: ignore[misc]
    """Data directory, WAL, declarations and Spark master of the pipeline, plus sensor thresholds.

    Empty strings mean "the embedded default" (``<data_dir>/wal.db``, ``./defs``, the jar folder
    under the data directory).
    """

    data_dir: str = str(DEFAULT_DATA_DIR)
    wal_url: str = ""
    defs_dir: str = str(DEFAULT_DEFS_DIR)
    spark_master: str = DEFAULT_SPARK_MASTER
    jar_dir: str = ""
    catalog_uri: str = ""
    warehouse: str = ""
    spark_remote: str = ""
    backlog_bytes: int = 1_000_000
    backlog_age_seconds: int = 60

    _context: PipelineContext | None = PrivateAttr(default=None)
    _pyspark: LazyPySparkResource | None = PrivateAttr(default=None)

    def settings(self) -> PipelineSettings:
        """The pipeline settings this resource stands for."""
        env = dict(os.environ)  # resource use is a process edge: ${VAR} in destination URLs
        overrides = {
            ENV_SPARK_MASTER: self.spark_master,
            ENV_JAR_DIR: self.jar_dir,
            ENV_CATALOG_URI: self.catalog_uri,
            ENV_WAREHOUSE: self.warehouse,
            ENV_SPARK_REMOTE: self.spark_remote,
        }
        env.update({k: v for k, v in overrides.items() if v})
        return PipelineSettings.from_env(
            env,
            data_dir=self.data_dir,
            wal_url=self.wal_url or None,
            defs_dir=self.defs_dir,
        )

    def context(self) -> PipelineContext:
        """The run's pipeline context (one per run: declarations applied once, one WAL handle,
        the process's Spark session)."""
        if self._context is None:
            settings = self.settings()
            self._context = PipelineContext(settings, spark_provider=lambda: self._spark(settings))
        return self._context

    def _spark(self, settings: PipelineSettings) -> Any:
        """The run's session: a Spark Connect client through ``dagster-pyspark`` where a
        server serves this lake, else an in-process driver."""
        spark = spark_settings(settings)
        remote = resolve_remote(settings.spark_remote, spark)
        if remote is None:
            return create_spark_session(spark, env=settings.env)
        self._pyspark = LazyPySparkResource(spark_config={"spark.remote": remote})
        session = self._pyspark.spark_session
        check_served_catalog(session, replace(spark, remote=remote))
        return session

    def wal(self) -> WriteAheadLog:
        """The WAL (without starting Spark)."""
        return self.context().wal

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Close the WAL at the end of a run or sensor tick."""
        if self._context is not None:
            self._context.close()
            self._context = None
