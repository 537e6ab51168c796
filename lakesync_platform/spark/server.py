"""The Spark Connect server: one long-lived Spark driver for every pipeline process.

Starting a Spark driver costs a JVM, the jars and the Iceberg catalog — 3 to 12 s, every run.
The Spark Connect server (``org.apache.spark.sql.connect.service.SparkConnectServer``, the
``spark-connect_2.12`` jar pinned in ``install/java/pom.xml``) holds them once: Dagster runs,
``lakesync run``, ``lakesync query`` and ``history`` connect to it as thin gRPC clients
(``SparkSession.builder.remote("sc://HOST:PORT")``) and start in a fraction of a second.

The server is configured from the same :class:`~lakesync_platform.spark.session.SparkSettings`
as an in-process session (:meth:`SparkSettings.spark_conf`, one definition): catalog,
extensions, jars and memory are static settings of the server, not of its clients; a client
checks that the server's catalog is the one its own settings name
(:func:`~lakesync_platform.spark.session.create_spark_session`).

A server started for a data directory records itself in ``<data-dir>/spark-connect.json``
(:class:`ServerRecord`): a ``lakesync run`` beside ``lakesync dev`` finds it there
(:func:`discover_server`) and connects instead of starting its own JVM.

Spark 3.5's server binds its port on every interface (``spark.connect.grpc.binding.address``
arrived in Spark 4): on a shared host, keep the port behind a firewall.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from ..core.errors import LakeSyncError
from ..install.jdk import find_java
from .session import CONNECT_MARKERS, SparkSettings, session_jars

__all__ = [
    "CONNECT_SERVER_CLASS",
    "DEFAULT_CONNECT_PORT",
    "LOCAL",
    "ServerRecord",
    "discover_server",
    "port_answers",
    "record_path",
    "resolve_remote",
    "server_command",
    "start_server",
    "wait_for_server",
]

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_CONNECT_PORT = 15002
"""Spark Connect's own default port."""
LOCAL = "local"
"""The remote setting that forces an in-process session even where a server is recorded."""


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """What ``<data-dir>/spark-connect.json`` says of the server started for that directory."""

    url: str
    pid: int
    catalog_uri: str
    started_ms: int

    @property
    def host_port(self) -> tuple[str, int]:
        """The server's host and port (from ``url``)."""
        return _host_port(self.url)


def record_path(data_dir: Path) -> Path:
    """Where the server started for ``data_dir`` records itself."""
    return data_dir.resolve() / "spark-connect.json"


def _host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise LakeSyncError(f"not a Spark Connect URL: {url!r} (sc://HOST:PORT)")
    return parsed.hostname, parsed.port or DEFAULT_CONNECT_PORT


def port_answers(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s):
        return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def discover_server(settings: SparkSettings) -> ServerRecord | None:
    """The live server recorded in ``settings``' data directory for the same catalog, if any.

    A record whose process is gone or whose port does not answer is stale and ignored (a
    killed ``lakesync dev`` leaves one behind).
    """
    path = record_path(settings.data_dir)
    try:
        raw = json.loads(path.read_text())
        record = ServerRecord(
            str(raw["url"]), int(raw["pid"]), str(raw["catalog_uri"]), int(raw["started_ms"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.catalog_uri != settings.resolved_catalog_uri or not _alive(record.pid):
        return None
    return record if port_answers(*record.host_port) else None


def server_command(
    settings: SparkSettings, port: int, env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The ``spark-submit`` command line (and its environment) of a Connect server for
    ``settings`` on ``port``: pyspark's own launcher, with the session's whole configuration.

    With no ``packages`` the jar folder is filled first (idempotent), as for an in-process
    session.
    """
    import pyspark

    java = find_java(env)
    if settings.packages and "spark-connect_2.12" not in settings.packages:
        # The server's class comes from Maven too when the jars do.
        extra = f"org.apache.spark:spark-connect_2.12:{_connect_version()}"
        settings = _with_packages(settings, f"{settings.packages},{extra}")
    jars, local_fs = session_jars(settings, env)
    home = Path(pyspark.__file__).resolve().parent
    conf = settings.spark_conf(jars, local_fs=local_fs is not None)
    conf["spark.connect.grpc.binding.port"] = str(port)
    cmd = [
        str(home / "bin" / "spark-submit"),
        "--master",
        settings.master,
        "--name",
        f"{settings.app_name}-connect",
        "--class",
        CONNECT_SERVER_CLASS,
    ]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd.append("spark-internal")
    launch_env = {**env, **java.launcher_env, "SPARK_HOME": str(home)}
    # The server is a driver of its own, whatever sessions the starting process made.
    for name in ("PYSPARK_SUBMIT_ARGS", *CONNECT_MARKERS):
        launch_env.pop(name, None)
    return cmd, launch_env


def _connect_version() -> str:
    from ..install.jars import pinned_jars

    for jar in pinned_jars():
        if jar.artifact.startswith("spark-connect"):
            return jar.version
    raise LakeSyncError("install/java/pom.xml pins no spark-connect jar")


def _with_packages(settings: SparkSettings, packages: str) -> SparkSettings:
    from dataclasses import replace

    return replace(settings, packages=packages)


def start_server(
    settings: SparkSettings,
    port: int,
    env: Mapping[str, str],
    *,
    log_path: Path | None = None,
    new_session: bool = True,
    die_with_parent: bool = True,
) -> subprocess.Popen[bytes]:
    """Start a Connect server for ``settings`` on ``port`` in the background and record it in
    the data directory; return its process (the caller waits with :func:`wait_for_server` and
    stops it). Its output goes to ``log_path`` (default ``<data-dir>/logs/spark-connect.log``).
    With ``die_with_parent`` the server gets SIGTERM when the process that started it dies,
    however it dies (Linux's parent-death signal), so a killed ``lakesync dev`` or test run
    leaves no JVM holding the port."""
    cmd, launch_env = server_command(settings, port, env)
    if settings.resolved_warehouse.startswith("file:"):
        Path(urlparse(settings.resolved_warehouse).path).mkdir(parents=True, exist_ok=True)
    settings.resolved_log_file.parent.mkdir(parents=True, exist_ok=True)
    out_path = log_path or settings.resolved_log_file.with_name("spark-connect.log")
    with out_path.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            env=launch_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=new_session,
            preexec_fn=_parent_death_signal if die_with_parent else None,
        )
    record = ServerRecord(
        f"sc://127.0.0.1:{port}",
        proc.pid,
        settings.resolved_catalog_uri,
        int(time.time() * 1000),
    )
    path = record_path(settings.data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(record)))
    tmp.replace(path)
    return proc


def _parent_death_signal() -> None:
    """In the child before ``exec``: SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)``;
    kept across the launcher's ``exec`` of the JVM). A no-op where Linux's prctl is missing."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_for_server(
    url: str, proc: subprocess.Popen[bytes] | None = None, *, timeout_s: float = 120.0
) -> float:
    """Wait until the server at ``url`` accepts connections; return the seconds waited.

    Raises :class:`LakeSyncError` when ``proc`` exits first or the timeout passes.
    """
    host, port = _host_port(url)
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if proc is not None and proc.poll() is not None:
            raise LakeSyncError(
                f"the Spark Connect server exited with {proc.returncode} before answering on "
                f"{url} (see its log, <data-dir>/logs/spark-connect.log)"
            )
        if port_answers(host, port):
            return time.monotonic() - started
        time.sleep(0.2)
    raise LakeSyncError(f"the Spark Connect server did not answer on {url} within {timeout_s}s")


def resolve_remote(setting: str | None, settings: SparkSettings) -> str | None:
    """The Connect server a process should use: ``setting`` (``LAKESYNC_SPARK_REMOTE``) when it
    names one, none for :data:`LOCAL`, else the live server recorded for ``settings``' data
    directory (:func:`discover_server`), else none (an in-process Spark)."""
    if setting == LOCAL:
        return None
    if setting:
        _host_port(setting)  # a clear error for a malformed URL, before any connection
        return setting
    record = discover_server(settings)
    return None if record is None else record.url
