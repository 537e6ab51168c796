"""What every pipeline stage runs with: one :class:`PipelineContext` per run.

The context holds the run's settings and opens its handles lazily — the WAL on first use, the
Spark session only when a stage or check needs it (sensors never start one), the pyiceberg
catalog every stage reads the lake's metadata with (:attr:`PipelineContext.lake_catalog`),
destinations on demand. The YAML
declarations are read once, and their tables are applied to the WAL's config store once per
context (:meth:`PipelineContext.apply_declarations`), before the first stage reads the
gateway's tables; the config store stays the source of truth, so a table registered through
the admin route flows through like a declared one.

Stages are modules beside this one (:mod:`.flush`, :mod:`.state`, :mod:`.materialise`), each a
function ``run_<stage>(ctx, gw, …)`` plus the checks of what it wrote, returning
:class:`CheckOutcome`. Each stage and check runs inside :meth:`PipelineContext.exclusive`: one
at a time on a lake, whatever process runs it (:mod:`.lock`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..adapters.destination import Destination
from ..adapters.sql import SqlAdapter
from ..core.errors import LakeSyncError
from ..core.schema import TableSchema
from ..declarations import (
    Declarations,
    DestinationDecl,
    apply_declarations,
    expand_env,
    load_declarations,
)
from ..settings import ENV_WAL_URL, ENV_WAREHOUSE, PipelineSettings
from ..spark.server import resolve_remote
from ..spark.session import S3Access, SparkSettings, create_spark_session
from ..spark.session_catalog import session_catalog
from ..wal.sqlite import BATCH_MEMORY
from ..wal.store import WriteAheadLog
from .lock import LakeLock, lake_lock

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

__all__ = [
    "CheckOutcome",
    "PipelineContext",
    "cluster_warnings",
    "open_destination",
    "spark_settings",
]

log = logging.getLogger(__name__)


def spark_settings(settings: PipelineSettings) -> SparkSettings:
    """The Spark session settings the pipeline settings stand for (embedded defaults under the
    data directory unless given)."""
    return SparkSettings(
        data_dir=settings.data_dir,
        master=settings.spark_master,
        catalog_uri=settings.catalog_uri,
        warehouse=settings.warehouse,
        jar_dir=settings.resolved_jar_dir,
        packages=settings.spark_packages,
        s3=S3Access(
            endpoint=settings.object_store.endpoint,
            region=settings.object_store.region,
            access_key_id=settings.object_store.access_key_id,
            secret_access_key=settings.object_store.secret_access_key,
            session_token=settings.object_store.session_token,
        ),
        log_file=settings.layout.spark_log,
        driver_memory=settings.spark_cluster.driver_memory,
        executor_memory=settings.spark_cluster.executor_memory,
        executor_cores=settings.spark_cluster.executor_cores,
        cores_max=settings.spark_cluster.cores_max,
        driver_host=settings.spark_cluster.driver_host,
    )


def cluster_warnings(settings: PipelineSettings) -> list[str]:
    """What executors on other hosts could not reach with these settings (none in local mode).

    On a cluster the executors read the WAL (over JDBC) and write the warehouse themselves; the
    driver alone talks to the catalog. A ``file:`` warehouse or a SQLite WAL lives on the
    driver's disk, so only a cluster whose workers share that disk (one host) can run the jobs.
    """
    spark = spark_settings(settings)
    if not spark.on_cluster:
        return []
    found = []
    if spark.resolved_warehouse.startswith("file:"):
        found.append(
            f"the warehouse {spark.resolved_warehouse} is on this machine's disk, but the Spark "
            f"master {spark.master} runs executors elsewhere: only a single-host cluster can "
            f"read and write it; put it in object storage ({ENV_WAREHOUSE}=s3://…)"
        )
    if settings.resolved_wal_url.startswith("sqlite"):
        found.append(
            f"the WAL {settings.resolved_wal_url} is a file on this machine, but the Spark master "
            f"{spark.master} runs the executors that read it elsewhere: only a single-host "
            f"cluster can read it; put the WAL on PostgreSQL ({ENV_WAL_URL}=postgresql://…)"
        )
    return found


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """Result of a pipeline check: ``passed`` plus numbers for the UI."""

    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def open_destination(dest: DestinationDecl, env: Mapping[str, str]) -> Destination[Any]:
    """Open a declared destination, ``${VAR}`` in its values expanded from ``env``; the caller
    closes it. A BigQuery destination is probed once on opening, so an unreachable endpoint
    fails before anything is written."""

    def value(raw: str | None) -> str | None:
        return None if raw is None else expand_env(raw, env)

    if dest.kind == "bigquery":
        from ..adapters.bigquery import BigQueryAdapter

        return BigQueryAdapter.connect(
            value(dest.project) or "",
            value(dest.dataset) or "",
            location=value(dest.location),
            endpoint=value(dest.endpoint),
        )
    return SqlAdapter.connect(value(dest.url) or "")


class PipelineContext:
    """The handles of one pipeline run over one data directory, opened on first use.

    ``spark`` and ``wal`` may be passed in (tests, benchmarks); a WAL passed in is not closed
    by :meth:`close`. ``spark_provider`` hands out the session on first use instead (the
    Dagster resource's ``dagster-pyspark`` session). Otherwise the session is a Spark Connect
    client of the settings' server (:func:`~lakesync_platform.spark.server.resolve_remote`:
    ``LAKESYNC_SPARK_REMOTE``, else the server recorded in the data directory), or an
    in-process driver when there is none. The session is never stopped here: Spark allows one
    driver per process, and the next run reuses it.
    """

    def __init__(
        self,
        settings: PipelineSettings,
        *,
        spark: SparkSession | None = None,
        wal: WriteAheadLog | None = None,
        spark_provider: Callable[[], SparkSession] | None = None,
    ) -> None:
        self.settings = settings
        self._spark = spark
        self._spark_provider = spark_provider
        self._wal = wal
        self._owns_wal = wal is None
        self._declarations: Declarations | None = None
        self._applied: int | None = None

    @property
    def spark(self) -> SparkSession:
        """The Spark session (started on first use)."""
        if self._spark is None:
            if self._spark_provider is not None:
                self._spark = self._spark_provider()
                return self._spark
            spark = spark_settings(self.settings)
            remote = resolve_remote(self.settings.spark_remote, spark)
            if remote is None:
                for warning in cluster_warnings(self.settings):
                    log.warning("%s", warning)
            self._spark = create_spark_session(replace(spark, remote=remote), env=self.settings.env)
        return self._spark

    @cached_property
    def lake_lock(self) -> LakeLock:
        """The inter-process lock of this run's lake (where its catalog lives)."""
        return lake_lock(spark_settings(self.settings), self.settings.lock_timeout_s)

    def exclusive(self, stage: str, gw: str) -> AbstractContextManager[None]:
        """Hold the lake's lock while ``stage`` of ``gw`` runs (waiting for another holder,
        up to the settings' ``lock_timeout_s``)."""
        return self.lake_lock.hold(stage, gw)

    @cached_property
    def lake_catalog(self) -> Catalog:
        """pyiceberg over the catalog the run's Spark session writes (SQLite or PostgreSQL; any
        warehouse, S3 included), built from the session's own catalog settings
        (:func:`~lakesync_platform.spark.session_catalog.session_catalog`): what every stage
        reads snapshot metadata with — watermarks, summaries, histories, table files — in this
        process, with a classic Spark session or a Spark Connect client alike. Each read loads
        the table afresh. Opening it starts the session if it is not running yet."""
        try:
            return session_catalog(self.spark)
        except ValueError as exc:
            raise LakeSyncError(f"the lake's catalog cannot be read by pyiceberg: {exc}") from exc

    @cached_property
    def iceberg_catalog(self) -> Catalog | None:
        """:attr:`lake_catalog` where the driver also reads the rows directly (a ``file:``
        warehouse: materialise), else ``None`` (Spark reads them)."""
        if not str(self.lake_catalog.properties.get("warehouse", "")).startswith("file:"):
            return None
        return self.lake_catalog

    @property
    def wal(self) -> WriteAheadLog:
        """The WAL (opened on first use)."""
        if self._wal is None:
            self.settings.data_dir.mkdir(parents=True, exist_ok=True)
            self._wal = WriteAheadLog.open(self.settings.resolved_wal_url, memory=BATCH_MEMORY)
        return self._wal

    @property
    def declarations(self) -> Declarations:
        """The YAML declarations of the defs folder (loaded once)."""
        if self._declarations is None:
            self._declarations = load_declarations(self.settings.resolved_defs_dir)
        return self._declarations

    def close(self) -> None:
        """Close the WAL if this context opened it (the Spark session stays for reuse)."""
        if self._wal is not None and self._owns_wal:
            self._wal.close()
            self._wal = None

    def apply_declarations(self, now_ms: int = 0) -> int:
        """Register the declared tables in the WAL's config store, once per context; return
        how many were applied (later calls write nothing and return the same count)."""
        if self._applied is None:
            self._applied = apply_declarations(self.declarations, self.wal, now_ms)
        return self._applied

    def gateways(self) -> list[str]:
        """Declared gateways plus every gateway the WAL knows."""
        return sorted(set(self.declarations.gateways) | set(self.wal.gateway_ids()))

    def tables(self, gw: str) -> dict[str, TableSchema]:
        """The gateway's registered schemas (the declarations applied first, once)."""
        self.apply_declarations()
        return dict(sorted(self.wal.schemas(gw).items()))

    def destinations(self, gw: str) -> dict[str, DestinationDecl]:
        """The gateway's declared destinations."""
        return dict(self.declarations.gateway(gw).destinations)

    def open_destination(self, dest: DestinationDecl) -> Destination[Any]:
        """Open a declared destination (:func:`open_destination` with the settings' env)."""
        return open_destination(dest, self.settings.expansion_env)
