"""Every setting of the platform, in one place: names, defaults and the data directory's layout.

Settings are read once at each process edge — the CLI, the gateway factory's caller, Dagster's
resources — from an environment mapping that the edge passes in, and handed down as these
frozen values. Nothing here reads ``os.environ`` itself and nothing reads anything at import.

The data directory holds every embedded default (ARCHITECTURE.md §7)::

    <data-dir>/
      wal.db          the write-ahead log and config store (SQLite)
      catalog.db      the Iceberg JDBC catalog (SQLite)
      catalog.db.lock the pipeline's lock on that catalog (and .holder: who holds it)
      warehouse/      the Iceberg warehouse
      jars/           the Spark/Iceberg jars and the lake's local filesystem jar
      checkpoints/    initial-sync checkpoints, one folder per gateway (warehouse on disk)
      jwt_secret      the gateway's signing secret (created on first start)
      logs/           logs of processes started by ``lakesync dev``, the JVM's (spark.log) and
                      the Python libraries' under ``lakesync run`` (run.log)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DEFAULT_ACTION_LEASE_S",
    "DEFAULT_ACTION_RETENTION_S",
    "DEFAULT_ACTION_TIMEOUT_S",
    "DEFAULT_BACKLOG_SENSOR_SECONDS",
    "DEFAULT_CHECKPOINT_CHUNK_BYTES",
    "DEFAULT_CHECKPOINT_EVERY_ENTRIES",
    "DEFAULT_CHECKPOINT_GRACE_S",
    "DEFAULT_DATA_DIR",
    "DEFAULT_DEDUP_RETENTION_S",
    "DEFAULT_DEFS_DIR",
    "DEFAULT_LOCK_TIMEOUT_SECONDS",
    "DEFAULT_ORPHAN_AGE_S",
    "DEFAULT_SNAPSHOT_RETENTION_S",
    "DEFAULT_SPARK_DRIVER_MEMORY",
    "DEFAULT_SPARK_EXECUTOR_MEMORY",
    "DEFAULT_SPARK_MASTER",
    "DEFAULT_UPKEEP_CRON",
    "DEFAULT_WAL_RETENTION_S",
    "ENV_ACTION_LEASE_SECONDS",
    "ENV_ACTION_RETENTION_SECONDS",
    "ENV_ACTION_TIMEOUT_SECONDS",
    "ENV_AWS_ACCESS_KEY_ID",
    "ENV_AWS_DEFAULT_REGION",
    "ENV_AWS_ENDPOINT_URL",
    "ENV_AWS_ENDPOINT_URL_S3",
    "ENV_AWS_REGION",
    "ENV_AWS_SECRET_ACCESS_KEY",
    "ENV_AWS_SESSION_TOKEN",
    "ENV_BACKLOG_AGE_SECONDS",
    "ENV_BACKLOG_BYTES",
    "ENV_BACKLOG_SENSOR_SECONDS",
    "ENV_CATALOG_URI",
    "ENV_CHECKPOINTS",
    "ENV_CHECKPOINT_CHUNK_BYTES",
    "ENV_CHECKPOINT_EVERY_ENTRIES",
    "ENV_CHECKPOINT_GRACE_SECONDS",
    "ENV_COMPACT_EVERY_FILES",
    "ENV_COMPACT_MIN_INPUT_FILES",
    "ENV_COMPACT_SMALL_FILE_BYTES",
    "ENV_COMPACT_TARGET_FILE_BYTES",
    "ENV_DATA_DIR",
    "ENV_DEDUP_RETENTION_SECONDS",
    "ENV_DEFS_DIR",
    "ENV_DRAIN_SECONDS",
    "ENV_FOLLOW_MAX_SECONDS",
    "ENV_FOLLOW_SECONDS",
    "ENV_JAR_DIR",
    "ENV_JWT_SECRET",
    "ENV_JWT_SECRET_PREVIOUS",
    "ENV_LOCK_TIMEOUT_SECONDS",
    "ENV_MAX_BACKLOG_BYTES",
    "ENV_MAX_SMALL_FILES",
    "ENV_ORPHAN_AGE_SECONDS",
    "ENV_SNAPSHOT_RETENTION_SECONDS",
    "ENV_SPARK_CONNECT_PORT",
    "ENV_SPARK_CORES_MAX",
    "ENV_SPARK_DRIVER_HOST",
    "ENV_SPARK_DRIVER_MEMORY",
    "ENV_SPARK_EXECUTOR_CORES",
    "ENV_SPARK_EXECUTOR_MEMORY",
    "ENV_SPARK_MASTER",
    "ENV_SPARK_PACKAGES",
    "ENV_SPARK_REMOTE",
    "ENV_UPKEEP_CRON",
    "ENV_WAL_RETENTION_ENTRIES",
    "ENV_WAL_RETENTION_SECONDS",
    "ENV_WAL_URL",
    "ENV_WAREHOUSE",
    "DataLayout",
    "GatewaySettings",
    "ObjectStoreSettings",
    "PipelineSettings",
    "RetentionSettings",
    "SparkClusterSettings",
    "UpkeepSettings",
    "checkpoint_root",
]

# ---------------------------------------------------------------- environment variable names

ENV_DATA_DIR = "LAKESYNC_DATA_DIR"
ENV_DEFS_DIR = "LAKESYNC_DEFS_DIR"
ENV_WAL_URL = "LAKESYNC_WAL_URL"
ENV_JWT_SECRET = "LAKESYNC_JWT_SECRET"
ENV_JWT_SECRET_PREVIOUS = "LAKESYNC_JWT_SECRET_PREVIOUS"
ENV_MAX_BACKLOG_BYTES = "LAKESYNC_MAX_BACKLOG_BYTES"
ENV_SPARK_MASTER = "LAKESYNC_SPARK_MASTER"
ENV_SPARK_PACKAGES = "LAKESYNC_SPARK_PACKAGES"
# The Spark Connect server pipeline processes connect to (``sc://HOST:PORT``); ``local`` forces
# an in-process Spark; unset: the server ``lakesync dev`` recorded in the data directory, if it
# runs, else in-process (lakesync_platform/spark/server.py).
ENV_SPARK_REMOTE = "LAKESYNC_SPARK_REMOTE"
ENV_SPARK_CONNECT_PORT = "LAKESYNC_SPARK_CONNECT_PORT"
ENV_CATALOG_URI = "LAKESYNC_CATALOG_URI"
ENV_WAREHOUSE = "LAKESYNC_WAREHOUSE"
ENV_JAR_DIR = "LAKESYNC_JAR_DIR"
ENV_BACKLOG_BYTES = "LAKESYNC_BACKLOG_BYTES"
ENV_BACKLOG_AGE_SECONDS = "LAKESYNC_BACKLOG_AGE_SECONDS"
# How often the backlog sensor looks at the WAL (Dagster's minimum interval between its ticks).
ENV_BACKLOG_SENSOR_SECONDS = "LAKESYNC_BACKLOG_SENSOR_SECONDS"
# A sync run that finished its steps keeps syncing new changes, pass after pass, until this many
# seconds pass without any (0: it ends; lakesync_platform/pipeline/follow.py), at most the max.
ENV_FOLLOW_SECONDS = "LAKESYNC_FOLLOW_SECONDS"
ENV_FOLLOW_MAX_SECONDS = "LAKESYNC_FOLLOW_MAX_SECONDS"
ENV_LOCK_TIMEOUT_SECONDS = "LAKESYNC_LOCK_TIMEOUT_SECONDS"

# The AWS SDKs' and CLI's own variables (an S3 warehouse): credentials, region, and a custom
# endpoint for S3-compatible stores (R2, MinIO); ``AWS_ENDPOINT_URL_S3`` wins over the general
# ``AWS_ENDPOINT_URL``, ``AWS_REGION`` over ``AWS_DEFAULT_REGION``, as in the SDKs.
ENV_AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
ENV_AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
ENV_AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"
ENV_AWS_REGION = "AWS_REGION"
ENV_AWS_DEFAULT_REGION = "AWS_DEFAULT_REGION"
ENV_AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
ENV_AWS_ENDPOINT_URL_S3 = "AWS_ENDPOINT_URL_S3"
ENV_ACTION_TIMEOUT_SECONDS = "LAKESYNC_ACTION_TIMEOUT_SECONDS"
ENV_ACTION_LEASE_SECONDS = "LAKESYNC_ACTION_LEASE_SECONDS"
ENV_ACTION_RETENTION_SECONDS = "LAKESYNC_ACTION_RETENTION_SECONDS"
# Lake upkeep (compaction, snapshot expiry, orphan removal: UpkeepSettings).
ENV_SNAPSHOT_RETENTION_SECONDS = "LAKESYNC_SNAPSHOT_RETENTION_SECONDS"
ENV_ORPHAN_AGE_SECONDS = "LAKESYNC_ORPHAN_AGE_SECONDS"
ENV_COMPACT_MIN_INPUT_FILES = "LAKESYNC_COMPACT_MIN_INPUT_FILES"
ENV_COMPACT_TARGET_FILE_BYTES = "LAKESYNC_COMPACT_TARGET_FILE_BYTES"
ENV_MAX_SMALL_FILES = "LAKESYNC_MAX_SMALL_FILES"
# Compaction inside the sync job (lakesync_platform/pipeline/compaction.py): a table is compacted
# once this many data and delete files were added since its last rewrite (0: never in the job)…
ENV_COMPACT_EVERY_FILES = "LAKESYNC_COMPACT_EVERY_FILES"
# …and files under this size count as small there (the daily upkeep uses 75 % of the target).
ENV_COMPACT_SMALL_FILE_BYTES = "LAKESYNC_COMPACT_SMALL_FILE_BYTES"
ENV_UPKEEP_CRON = "LAKESYNC_UPKEEP_CRON"
ENV_WAL_RETENTION_SECONDS = "LAKESYNC_WAL_RETENTION_SECONDS"
ENV_WAL_RETENTION_ENTRIES = "LAKESYNC_WAL_RETENTION_ENTRIES"
ENV_DEDUP_RETENTION_SECONDS = "LAKESYNC_DEDUP_RETENTION_SECONDS"
ENV_CHECKPOINTS = "LAKESYNC_CHECKPOINTS"
ENV_CHECKPOINT_CHUNK_BYTES = "LAKESYNC_CHECKPOINT_CHUNK_BYTES"
ENV_CHECKPOINT_GRACE_SECONDS = "LAKESYNC_CHECKPOINT_GRACE_SECONDS"
ENV_CHECKPOINT_EVERY_ENTRIES = "LAKESYNC_CHECKPOINT_EVERY_ENTRIES"
ENV_DRAIN_SECONDS = "LAKESYNC_DRAIN_SECONDS"
ENV_SPARK_EXECUTOR_CORES = "LAKESYNC_SPARK_EXECUTOR_CORES"
ENV_SPARK_EXECUTOR_MEMORY = "LAKESYNC_SPARK_EXECUTOR_MEMORY"
ENV_SPARK_CORES_MAX = "LAKESYNC_SPARK_CORES_MAX"
ENV_SPARK_DRIVER_HOST = "LAKESYNC_SPARK_DRIVER_HOST"
ENV_SPARK_DRIVER_MEMORY = "LAKESYNC_SPARK_DRIVER_MEMORY"

# ---------------------------------------------------------------- defaults

DEFAULT_DATA_DIR = Path("data")
"""The data directory when neither ``--data-dir`` nor ``LAKESYNC_DATA_DIR`` names one."""
DEFAULT_DEFS_DIR = Path("defs")
"""The declarations folder when neither ``--defs`` nor ``LAKESYNC_DEFS_DIR`` names one."""
DEFAULT_SPARK_MASTER = "local[*]"
DEFAULT_BACKLOG_SENSOR_SECONDS = 15
"""The backlog sensor's minimum interval between ticks (``lakesync dev``: 1 s)."""
DEFAULT_LOCK_TIMEOUT_SECONDS = 900.0
"""How long a pipeline stage waits for another stage holding the lake's lock before it gives up
(the schedule's period: a stage still waiting by then is stuck behind a stuck one)."""
DEFAULT_ACTION_TIMEOUT_S = 10.0
"""How long an action request waits for its handler (it keeps running, and stores its result)."""
DEFAULT_ACTION_LEASE_S = 120.0
"""How long an action's claim holds before a retry may take it over (its process crashed)."""
DEFAULT_ACTION_RETENTION_S = 86_400.0
"""How long action results are kept for retries (a day)."""
DEFAULT_SNAPSHOT_RETENTION_S = 7 * 86_400.0
"""The lake's time-travel window (7 days): expiry keeps every snapshot that was current at some
moment within it."""
DEFAULT_ORPHAN_AGE_S = 86_400.0
"""Files in a table's folder that no snapshot references are removed once older than this (a
day, the floor Iceberg's own ``remove_orphan_files`` procedure insists on)."""
DEFAULT_UPKEEP_CRON = "0 3 * * *"
"""When the upkeep job (compaction, expiry, orphan removal) runs: daily at 03:00 UTC."""
DEFAULT_WAL_RETENTION_S = 86_400.0
"""How long the hot WAL keeps log entries the lake already holds (a day)."""
DEFAULT_DEDUP_RETENTION_S = 30 * 86_400.0
"""How long accepted delta ids are remembered, by the deltas' HLC (30 days)."""
DEFAULT_CHECKPOINT_CHUNK_BYTES = 16 << 20
"""The size a checkpoint chunk is cut at (16 MiB, the reference's)."""
DEFAULT_CHECKPOINT_GRACE_S = 3600.0
"""How long a superseded checkpoint stays readable for the clients still streaming it."""
DEFAULT_CHECKPOINT_EVERY_ENTRIES = 100_000
"""The checkpoint sensor's threshold: log entries in the lake past the current checkpoint."""
DEFAULT_SPARK_EXECUTOR_MEMORY = "1g"
"""Heap of each executor on a cluster (Spark's own default, stated): a worker must offer at
least this much memory, or the application waits for executors forever."""
DEFAULT_SPARK_DRIVER_MEMORY = "2g"
"""Heap of the driver (the process running a stage): materialise collects changed rows there."""


@dataclass(frozen=True, slots=True)
class DataLayout:
    """Where each embedded default lives under one data directory (see the module docstring)."""

    root: Path

    @classmethod
    def at(cls, data_dir: str | Path | None) -> DataLayout:
        """The layout of ``data_dir`` (the default data directory when ``None`` or empty)."""
        return cls(Path(data_dir or DEFAULT_DATA_DIR).resolve())

    @property
    def wal_db(self) -> Path:
        """The embedded WAL's SQLite file."""
        return self.root / "wal.db"

    @property
    def wal_url(self) -> str:
        """The embedded WAL's SQLAlchemy URL."""
        return f"sqlite:///{self.wal_db}"

    @property
    def catalog_db(self) -> Path:
        """The embedded Iceberg catalog's SQLite file."""
        return self.root / "catalog.db"

    @property
    def catalog_uri(self) -> str:
        """The embedded Iceberg catalog's JDBC URL."""
        return f"jdbc:sqlite:{self.catalog_db}"

    @property
    def warehouse_dir(self) -> Path:
        """The embedded Iceberg warehouse folder."""
        return self.root / "warehouse"

    @property
    def warehouse_uri(self) -> str:
        """The embedded Iceberg warehouse as a ``file://`` URI."""
        return self.warehouse_dir.as_uri()

    @property
    def jar_dir(self) -> Path:
        """The Spark/Iceberg jar folder."""
        return self.root / "jars"

    @property
    def checkpoints_dir(self) -> Path:
        """Initial-sync checkpoints, one folder per gateway (when the lake is on local disk)."""
        return self.root / "checkpoints"

    @property
    def jwt_secret_file(self) -> Path:
        """The gateway's signing secret, created on its first start."""
        return self.root / "jwt_secret"

    @property
    def logs_dir(self) -> Path:
        """Logs of the processes the platform starts."""
        return self.root / "logs"

    @property
    def spark_log(self) -> Path:
        """The log of the Spark driver's JVM (log4j), kept off the terminal."""
        return self.logs_dir / "spark.log"

    @property
    def run_log(self) -> Path:
        """Warnings the libraries under ``lakesync run`` log in Python, kept off the terminal."""
        return self.logs_dir / "run.log"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything the gateway process is configured with.

    ``jwt_secrets`` are tried in order (primary first, then previous ones during rotation); a
    token is accepted until ``exp`` plus ``jwt_leeway_s`` seconds of clock skew (0, the
    reference's rule, unless set). Auth is on unless ``auth_enabled`` is explicitly false (local
    development only). ``rate_limit`` requests per ``rate_window_s`` seconds per caller, when
    set.

    ``defs_dir`` holds the declarations whose action connectors the gateway serves and whose
    ``sources`` clients may pull from (``pull?source=NAME``); ``${VAR}`` in them is read from
    ``env``. An action request waits ``action_timeout_s`` for its
    handler; a claim older than ``action_lease_s`` (longer than the timeout) is taken over;
    results are kept ``action_retention_s``.

    WebSocket (``ws_*``): sessions per process (``ws_max_connections``), messages per
    second per socket, the frame size limit, replies and broadcast pages queued for a socket
    before it counts as too far behind and is closed, how often the WAL's last cursor is read
    to see other processes' commits, and the worker threads that run broadcast pulls (apart
    from the requests').

    ``checkpoints`` is where the pipeline writes initial-sync checkpoints (a folder or
    ``s3://…``, reached with ``object_store``; :func:`checkpoint_root`); ``None``: the gateway
    serves none.
    ``drain_s``: on SIGTERM the process fails readiness at once and keeps serving this long
    before it closes its WebSockets (1001) and shuts down — long enough for a balancer to
    notice (at least its check interval × fall count); 0 without a balancer.
    """

    wal_url: str
    jwt_secrets: tuple[str, ...] = ()
    jwt_leeway_s: int = 0
    auth_enabled: bool = True
    max_backlog_bytes: int | None = None
    rate_limit: int | None = None
    rate_window_s: int = 60
    allowed_origins: tuple[str, ...] | None = None
    max_body_bytes: int = 1_048_576
    request_timeout_s: float = 30.0
    defs_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    action_timeout_s: float = DEFAULT_ACTION_TIMEOUT_S
    action_lease_s: float = DEFAULT_ACTION_LEASE_S
    action_retention_s: float = DEFAULT_ACTION_RETENTION_S
    ws_max_connections: int = 1000
    ws_max_messages_per_s: int = 50
    ws_max_frame_bytes: int = 1_048_576
    ws_send_queue: int = 64
    ws_poll_interval_s: float = 0.025
    ws_feed_threads: int = 8
    checkpoints: str | None = None
    object_store: ObjectStoreSettings = field(default_factory=lambda: ObjectStoreSettings())
    drain_s: float = 0.0

    def __post_init__(self) -> None:
        if self.auth_enabled and not self.jwt_secrets:
            raise ValueError("auth is enabled but no JWT secret is configured")
        if self.action_lease_s <= self.action_timeout_s:
            raise ValueError("the action lease must be longer than the action timeout")
        if not self.drain_s >= 0:
            raise ValueError(f"the drain delay must be >= 0 seconds, got {self.drain_s!r}")


@dataclass(frozen=True, slots=True)
class ObjectStoreSettings:
    """How the lake reaches an S3 warehouse (``LAKESYNC_WAREHOUSE=s3://bucket/prefix``).

    Read from the standard AWS variables; ``None`` leaves a value to the AWS SDKs' own lookup
    (instance profiles, ``~/.aws``). ``endpoint`` is set for S3-compatible stores (R2, MinIO,
    a local server), which are then addressed path-style.
    """

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ObjectStoreSettings:
        """The ``AWS_*`` variables of ``env``."""
        return cls(
            endpoint=env.get(ENV_AWS_ENDPOINT_URL_S3) or env.get(ENV_AWS_ENDPOINT_URL) or None,
            region=env.get(ENV_AWS_REGION) or env.get(ENV_AWS_DEFAULT_REGION) or None,
            access_key_id=env.get(ENV_AWS_ACCESS_KEY_ID) or None,
            secret_access_key=env.get(ENV_AWS_SECRET_ACCESS_KEY) or None,
            session_token=env.get(ENV_AWS_SESSION_TOKEN) or None,
        )


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """What the lifecycle job keeps in the hot WAL (docs/pipeline.md, "Hot WAL retention").

    A log entry the lake holds is trimmed once it breaks either limit, as Kafka's retention
    does: older than ``wal_age_s`` seconds, or not among the newest ``wal_entries`` entries of
    its gateway (``None``: no count limit). Accepted delta ids of deltas stamped more
    than ``dedup_age_s`` ago are forgotten. ``batch`` entries or ids go per transaction.
    """

    wal_age_s: float = DEFAULT_WAL_RETENTION_S
    wal_entries: int | None = None
    dedup_age_s: float = DEFAULT_DEDUP_RETENTION_S
    # 2 000 per transaction: on SQLite a batch of 2 000 entries held the writer lock ~3 ms (5 000:
    # ~13 ms, 1 000: ~2.3 ms) against ~10-20 ms for a 500-delta push (benchmarks/bench_tiering.py).
    batch: int = 2_000

    def __post_init__(self) -> None:
        if not self.wal_age_s >= 0 or not self.dedup_age_s >= 0:
            raise ValueError("retention ages must be >= 0 seconds")
        if self.wal_entries is not None and self.wal_entries < 0:
            raise ValueError("the WAL's entry retention must be >= 0")
        if self.batch < 1:
            raise ValueError("the trim batch must be at least 1")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RetentionSettings:
        """``LAKESYNC_WAL_RETENTION_SECONDS``, ``LAKESYNC_WAL_RETENTION_ENTRIES`` and
        ``LAKESYNC_DEDUP_RETENTION_SECONDS`` of ``env`` (unset: the defaults)."""
        age = env.get(ENV_WAL_RETENTION_SECONDS)
        entries = env.get(ENV_WAL_RETENTION_ENTRIES)
        dedup = env.get(ENV_DEDUP_RETENTION_SECONDS)
        count: int | None = None
        if entries:
            try:
                count = int(entries)
            except ValueError:
                count = -1
            if count < 0:
                raise ValueError(
                    f"{ENV_WAL_RETENTION_ENTRIES} must be a whole number of entries (>= 0), "
                    f"got {entries!r}"
                )
        return cls(
            wal_age_s=_seconds(ENV_WAL_RETENTION_SECONDS, age) if age else DEFAULT_WAL_RETENTION_S,
            wal_entries=count,
            dedup_age_s=_seconds(ENV_DEDUP_RETENTION_SECONDS, dedup)
            if dedup
            else DEFAULT_DEDUP_RETENTION_S,
        )


@dataclass(frozen=True, slots=True)
class SparkClusterSettings:
    """What a pipeline run asks of a Spark cluster (a non-local ``LAKESYNC_SPARK_MASTER``).

    ``executor_memory`` is each executor's heap (``spark.executor.memory``; every worker must
    offer that much). ``executor_cores`` is each executor's cores (``None``: Spark standalone's
    own default, one executor per worker with all of its cores); ``cores_max`` caps the cores
    one run takes from the whole cluster (``None``: all it can get, so a second run waits for
    the first). ``driver_host`` is the address executors reach the driver at (``None``: Spark's
    choice, the host name's address). ``driver_memory`` applies in local mode too.
    """

    executor_memory: str = DEFAULT_SPARK_EXECUTOR_MEMORY
    executor_cores: int | None = None
    cores_max: int | None = None
    driver_host: str | None = None
    driver_memory: str = DEFAULT_SPARK_DRIVER_MEMORY

    def __post_init__(self) -> None:
        for name in ("executor_memory", "driver_memory"):
            value = getattr(self, name)
            if not _JVM_MEMORY.fullmatch(value):
                raise ValueError(f"{name} must be a JVM size such as 512m or 2g, got {value!r}")
        for name in ("executor_cores", "cores_max"):
            count = getattr(self, name)
            if count is not None and count < 1:
                raise ValueError(f"{name} must be at least 1, got {count!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SparkClusterSettings:
        """The ``LAKESYNC_SPARK_*`` resource variables of ``env`` (unset: the defaults)."""
        return cls(
            executor_memory=_jvm_size(
                ENV_SPARK_EXECUTOR_MEMORY, env, DEFAULT_SPARK_EXECUTOR_MEMORY
            ),
            executor_cores=_optional_count(
                ENV_SPARK_EXECUTOR_CORES, env.get(ENV_SPARK_EXECUTOR_CORES)
            ),
            cores_max=_optional_count(ENV_SPARK_CORES_MAX, env.get(ENV_SPARK_CORES_MAX)),
            driver_host=env.get(ENV_SPARK_DRIVER_HOST) or None,
            driver_memory=_jvm_size(ENV_SPARK_DRIVER_MEMORY, env, DEFAULT_SPARK_DRIVER_MEMORY),
        )


_JVM_MEMORY = re.compile(r"[1-9][0-9]*[kmgt]?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """Where the pipeline's inputs and outputs live; read once at the edge and passed down.

    Empty values mean the embedded defaults of :class:`DataLayout`. ``spark_remote`` names
    the Spark Connect server runs use (``sc://…``; ``local``: an in-process Spark; ``None``:
    the one recorded in the data directory if it runs). ``warehouse`` is a
    ``file://`` or ``s3://`` URI, reached with ``object_store``. ``env`` is the environment
    used to expand ``${VAR}`` in declared destination URLs (``LAKESYNC_DATA_DIR`` is always
    available there). ``lock_timeout_s`` bounds a stage's wait for the lake's lock
    (:mod:`lakesync_platform.pipeline.lock`). A best-effort destination is tried
    ``best_effort_attempts`` times per table and run, waiting exponentially from
    ``best_effort_wait_s`` seconds between tries. ``upkeep``: compaction, expiry and orphan
    removal (:class:`UpkeepSettings`). Checkpoints go to ``checkpoints``
    (:attr:`checkpoint_root`), cut into chunks of ``checkpoint_chunk_bytes``; a superseded one
    stays ``checkpoint_grace_s`` for the clients still reading it; the checkpoint sensor asks
    for a new one once ``checkpoint_every_entries`` more log entries are in the lake. A sync
    run follows the gateway for ``follow_s`` seconds after its last change (at most
    ``follow_max_s`` in all; 0: it does not follow; :mod:`lakesync_platform.pipeline.follow`).
    """

    data_dir: Path
    wal_url: str | None = None
    defs_dir: Path | None = None
    spark_master: str = DEFAULT_SPARK_MASTER
    catalog_uri: str | None = None
    warehouse: str | None = None
    jar_dir: Path | None = None
    spark_packages: str | None = None
    spark_remote: str | None = None
    object_store: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_SECONDS
    env: Mapping[str, str] = field(default_factory=dict)
    best_effort_attempts: int = 3
    best_effort_wait_s: float = 0.5
    upkeep: UpkeepSettings = field(default_factory=lambda: UpkeepSettings())
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    checkpoints: str | None = None
    checkpoint_chunk_bytes: int = DEFAULT_CHECKPOINT_CHUNK_BYTES
    checkpoint_grace_s: float = DEFAULT_CHECKPOINT_GRACE_S
    checkpoint_every_entries: int = DEFAULT_CHECKPOINT_EVERY_ENTRIES
    follow_s: float = 0.0
    follow_max_s: float = 600.0

    @property
    def checkpoint_root(self) -> str:
        """Where checkpoints are written (:func:`checkpoint_root`)."""
        return checkpoint_root(self.data_dir, self.warehouse, self.checkpoints)

    spark_cluster: SparkClusterSettings = field(default_factory=SparkClusterSettings)

    @property
    def layout(self) -> DataLayout:
        """The data directory's layout."""
        return DataLayout(self.data_dir.resolve())

    @property
    def resolved_wal_url(self) -> str:
        """The WAL's SQLAlchemy URL."""
        return self.wal_url or self.layout.wal_url

    @property
    def resolved_jar_dir(self) -> Path:
        """The Spark/Iceberg jar folder: ``LAKESYNC_JAR_DIR``, else ``<data-dir>/jars``."""
        return self.jar_dir or self.layout.jar_dir

    @property
    def resolved_defs_dir(self) -> Path:
        """The declarations folder."""
        return self.defs_dir or DEFAULT_DEFS_DIR.resolve()

    @property
    def expansion_env(self) -> dict[str, str]:
        """``env`` plus ``LAKESYNC_DATA_DIR``: what ``${VAR}`` in declarations may name."""
        return {**self.env, ENV_DATA_DIR: str(self.data_dir)}

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        *,
        data_dir: str | Path | None = None,
        wal_url: str | None = None,
        defs_dir: str | Path | None = None,
    ) -> PipelineSettings:
        """Settings from ``LAKESYNC_*`` variables in ``env``, overridden by explicit values."""
        layout = DataLayout.at(data_dir or env.get(ENV_DATA_DIR))
        defs = Path(defs_dir or env.get(ENV_DEFS_DIR) or DEFAULT_DEFS_DIR).resolve()
        jar_dir = env.get(ENV_JAR_DIR)
        lock_timeout = env.get(ENV_LOCK_TIMEOUT_SECONDS)
        chunk_bytes = env.get(ENV_CHECKPOINT_CHUNK_BYTES)
        grace = env.get(ENV_CHECKPOINT_GRACE_SECONDS)
        every = env.get(ENV_CHECKPOINT_EVERY_ENTRIES)
        return cls(
            data_dir=layout.root,
            wal_url=wal_url or env.get(ENV_WAL_URL) or None,
            defs_dir=defs,
            spark_master=env.get(ENV_SPARK_MASTER) or DEFAULT_SPARK_MASTER,
            catalog_uri=env.get(ENV_CATALOG_URI) or None,
            warehouse=env.get(ENV_WAREHOUSE) or None,
            jar_dir=Path(jar_dir) if jar_dir else None,
            spark_packages=env.get(ENV_SPARK_PACKAGES) or None,
            spark_remote=env.get(ENV_SPARK_REMOTE) or None,
            object_store=ObjectStoreSettings.from_env(env),
            lock_timeout_s=_seconds(ENV_LOCK_TIMEOUT_SECONDS, lock_timeout)
            if lock_timeout
            else DEFAULT_LOCK_TIMEOUT_SECONDS,
            env=dict(env),
            upkeep=UpkeepSettings.from_env(env),
            retention=RetentionSettings.from_env(env),
            checkpoints=env.get(ENV_CHECKPOINTS) or None,
            checkpoint_chunk_bytes=_count(ENV_CHECKPOINT_CHUNK_BYTES, chunk_bytes, 1)
            if chunk_bytes
            else DEFAULT_CHECKPOINT_CHUNK_BYTES,
            checkpoint_grace_s=_seconds(ENV_CHECKPOINT_GRACE_SECONDS, grace)
            if grace
            else DEFAULT_CHECKPOINT_GRACE_S,
            checkpoint_every_entries=_count(ENV_CHECKPOINT_EVERY_ENTRIES, every, 1)
            if every
            else DEFAULT_CHECKPOINT_EVERY_ENTRIES,
            spark_cluster=SparkClusterSettings.from_env(env),
            follow_s=_seconds(ENV_FOLLOW_SECONDS, follow)
            if (follow := env.get(ENV_FOLLOW_SECONDS))
            else 0.0,
            follow_max_s=_seconds(ENV_FOLLOW_MAX_SECONDS, most)
            if (most := env.get(ENV_FOLLOW_MAX_SECONDS))
            else 600.0,
        )


@dataclass(frozen=True, slots=True)
class UpkeepSettings:
    """How the lake is looked after (``lakesync_platform.pipeline.upkeep``).

    * ``snapshot_retention_s`` — the time-travel window: expiry keeps every snapshot that was
      current at some moment within it (so ``lakesync query --as-of`` reaches that far back),
      besides what the pipeline's watermarks and the tags and branches of other jobs pin;
    * ``orphan_age_s`` — files in a table's folder that no snapshot references are removed once
      older than this (removal holds the lake's lock, so no pipeline stage is writing; the age
      guards writers that do not take it);
    * ``min_input_files`` — a partition's small files are rewritten once it has this many
      (Iceberg's ``min-input-files``); ``target_file_bytes`` — the size compaction writes
      (files under 75 % of it count as small, Iceberg's ``min-file-size-bytes``);
    * ``max_small_files`` — the ``small_files`` check fails when a partition holds more;
    * ``delete_file_threshold`` — a state-table data file with this many delete files is
      rewritten with its deletes applied (1: every one, so a compacted table reads without
      merge-on-read deletes);
    * ``cron`` — when the upkeep job runs;
    * ``compact_every_files`` — the sync job compacts a table once this many data and delete
      files were added to it since its last rewrite (0: only the upkeep job compacts), rewriting
      the files under ``compact_small_file_bytes`` and merging delete files, never the large
      files (their deletes wait for Iceberg's delete-ratio threshold or the daily upkeep).
    """

    snapshot_retention_s: float = DEFAULT_SNAPSHOT_RETENTION_S
    orphan_age_s: float = DEFAULT_ORPHAN_AGE_S
    min_input_files: int = 5
    target_file_bytes: int = 128 * 1024 * 1024
    max_small_files: int = 10
    delete_file_threshold: int = 1
    cron: str = DEFAULT_UPKEEP_CRON
    compact_every_files: int = 16
    compact_small_file_bytes: int = 8 * 1024 * 1024

    @property
    def small_file_bytes(self) -> int:
        """Files under this size count as small (75 % of the target, as Iceberg counts them)."""
        return self.target_file_bytes * 3 // 4

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> UpkeepSettings:
        """The ``LAKESYNC_*`` upkeep variables of ``env`` (defaults where unset)."""
        default = cls()

        def seconds(name: str, fallback: float) -> float:
            value = env.get(name)
            return _seconds(name, value) if value else fallback

        def count(name: str, fallback: int, least: int) -> int:
            value = env.get(name)
            return _count(name, value, least) if value else fallback

        return cls(
            snapshot_retention_s=seconds(
                ENV_SNAPSHOT_RETENTION_SECONDS, default.snapshot_retention_s
            ),
            orphan_age_s=seconds(ENV_ORPHAN_AGE_SECONDS, default.orphan_age_s),
            min_input_files=count(ENV_COMPACT_MIN_INPUT_FILES, default.min_input_files, 2),
            target_file_bytes=count(ENV_COMPACT_TARGET_FILE_BYTES, default.target_file_bytes, 1024),
            max_small_files=count(ENV_MAX_SMALL_FILES, default.max_small_files, 1),
            cron=env.get(ENV_UPKEEP_CRON) or default.cron,
            compact_every_files=count(ENV_COMPACT_EVERY_FILES, default.compact_every_files, 0),
            compact_small_file_bytes=count(
                ENV_COMPACT_SMALL_FILE_BYTES, default.compact_small_file_bytes, 1024
            ),
        )


def _count(name: str, value: str, least: int) -> int:
    """A whole number of at least ``least`` from environment variable ``name``."""
    try:
        number = int(value)
    except ValueError:
        number = least - 1
    if number < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return number


def _optional_count(name: str, value: str | None) -> int | None:
    """A whole number >= 1 from environment variable ``name`` (unset or empty: ``None``)."""
    return _count(name, value, 1) if value else None


def _jvm_size(name: str, env: Mapping[str, str], default: str) -> str:
    """A JVM memory size (``512m``, ``2g``) from environment variable ``name``."""
    value = env.get(name) or default
    if not _JVM_MEMORY.fullmatch(value):
        raise ValueError(f"{name} must be a JVM size such as 512m or 2g, got {value!r}")
    return value


def _seconds(name: str, value: str) -> float:
    """A non-negative number of seconds from environment variable ``name``."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"{name} must be a number of seconds (>= 0), got {value!r}")
    return seconds


def checkpoint_root(data_dir: Path, warehouse: str | None, explicit: str | None = None) -> str:
    """Where checkpoints live: ``explicit`` (``LAKESYNC_CHECKPOINTS``) if given, else beside an
    S3 warehouse (``<warehouse>/_checkpoints``: ``_`` starts no gateway id, so no namespace's
    folder), else ``<data-dir>/checkpoints``."""
    if explicit:
        return explicit
    if warehouse and warehouse.startswith(("s3://", "s3a://")):
        return warehouse.rstrip("/") + "/_checkpoints"
    return str(DataLayout(data_dir.resolve()).checkpoints_dir)
