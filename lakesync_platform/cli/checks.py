"""What the commands check before they create or start anything, and ``lakesync doctor``.

A missing data directory, a missing WAL, an unknown gateway or a taken port is the caller's
slip, not a failure of the platform: the command stops with exit status 2 and one line saying
what is wrong and what to run — nothing is created on the way (:class:`NotReady`).

:func:`diagnose` runs every check of ``lakesync doctor`` — Java, the jar folder, the WAL, the
Iceberg catalog, the declared destinations, the ports of ``lakesync dev`` — and returns one
:class:`Finding` each, with the command that fixes what is wrong. It creates nothing: a WAL
or catalog that is not there yet is reported, not made, and an existing WAL is opened as the
gateway opens it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import click
import httpx
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from ..core.errors import LakeSyncError
from ..declarations import DestinationDecl
from ..settings import PipelineSettings

__all__ = [
    "Finding",
    "NotReady",
    "check_catalog",
    "check_destinations",
    "check_jars",
    "check_java",
    "check_ports",
    "check_wal",
    "diagnose",
    "embedded_wal_file",
    "port_owner",
    "require_data_dir",
    "require_free_ports",
]

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


class NotReady(click.ClickException):
    """What the command needs is not there (or not free): exit status 2, one line."""

    exit_code = 2


def require_data_dir(data_dir: Path) -> None:
    """Stop unless ``data_dir`` exists (never create it: a typo must not grow a new one)."""
    if not data_dir.is_dir():
        data_dir = data_dir.resolve()
        raise NotReady(
            f"no data directory {data_dir}: create it by starting the gateway once "
            f"(lakesync gateway --data-dir {data_dir}), or pass the right --data-dir"
        )


def embedded_wal_file(wal_url: str) -> Path | None:
    """The SQLite file of a ``sqlite:///PATH`` WAL URL; ``None`` for a database server."""
    if not wal_url.startswith("sqlite"):
        return None
    database = make_url(wal_url).database
    return Path(database) if database and database != ":memory:" else None


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on ``port`` (any address), from ``/proc/net/tcp{,6}``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if (
                    len(fields) > 9
                    and fields[3] == _LISTEN
                    and int(fields[1].rsplit(":", 1)[1], 16) == port
                ):
                    inodes.add(fields[9])
    return inodes


def port_owner(port: int) -> str | None:
    """``pid N (command)`` of the process listening on ``port``, if this user can see it."""
    targets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not targets:
        return None
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            fd_dir = f"/proc/{pid}/fd"
            if any(os.readlink(f"{fd_dir}/{fd}") in targets for fd in os.listdir(fd_dir)):
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                command = " ".join(raw.decode(errors="replace").split("\0")).strip()
                if len(command) > 80:
                    command = command[:77] + "..."
                return f"pid {pid} ({command or '?'})"
    return None


def _taken(port: int, host: str) -> bool:
    """Whether binding ``host:port`` fails (``SO_REUSEADDR``, as servers bind: a closed
    connection lingering in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def require_free_ports(ports: Iterable[tuple[str, int]], host: str = "127.0.0.1") -> None:
    """Stop unless every ``(flag, port)`` can be bound on ``host``; name what holds a taken one."""
    problems = [
        f"port {port} is already in use by {port_owner(port) or 'another process'}; "
        f"stop it or choose another port with {flag}"
        for flag, port in ports
        if _taken(port, host)
    ]
    if problems:
        raise NotReady("\n".join(problems))


@dataclass(frozen=True, slots=True)
class Finding:
    """One check of ``lakesync doctor``: what was looked at, whether it is well, and the
    command (or step) that fixes it when it is not."""

    check: str
    ok: bool
    detail: str
    fix: str | None = None


def check_java(env: Mapping[str, str]) -> Finding:
    """A Java runtime for Spark."""
    from ..install.jdk import find_java

    try:
        return Finding("java", True, str(find_java(env).java))
    except LakeSyncError as exc:
        fix = "apt-get install openjdk-17-jdk-headless, then lakesync setup"
        return Finding("java", False, exc.message, fix)


def check_jars(settings: PipelineSettings) -> Finding:
    """The jar folder holds every jar pinned in ``install/java/pom.xml``."""
    from ..install.jars import missing_jars, pinned_jars

    jar_dir = settings.resolved_jar_dir
    needed = pinned_jars()
    missing = [jar.file_name for jar in missing_jars(jar_dir)]
    if not missing:
        return Finding("jars", True, f"{jar_dir} ({len(needed)} jars)")
    return Finding(
        "jars",
        False,
        f"missing in {jar_dir}: {', '.join(missing)}",
        f"lakesync setup --data-dir {settings.data_dir}",
    )


def check_wal(settings: PipelineSettings) -> Finding:
    """The WAL opens and answers (an embedded one not created yet is fine)."""
    from ..wal.store import WriteAheadLog

    url = settings.resolved_wal_url
    wal_file = embedded_wal_file(url)
    start = f"lakesync dev --data-dir {settings.data_dir}"
    if wal_file is not None and not wal_file.exists():
        return Finding("wal", True, f"none yet at {wal_file}: the gateway's first start makes it")
    try:
        wal = WriteAheadLog.open(url, now_ms=int(time.time() * 1000))
        try:
            gateways = wal.gateway_ids()
        finally:
            wal.close()
    except (LakeSyncError, SQLAlchemyError) as exc:
        message = exc.message if isinstance(exc, LakeSyncError) else str(exc).splitlines()[0]
        where = wal_file or make_url(url).render_as_string(hide_password=True)
        fix = (
            f"move the damaged {wal_file} aside, then {start}"
            if wal_file is not None
            else "start the database server, or point --wal-url / LAKESYNC_WAL_URL at it"
        )
        return Finding("wal", False, f"{where}: {message}", fix)
    listed = ", ".join(gateways) or "no gateways yet"
    return Finding("wal", True, f"{wal_file or 'database'}: {listed}")


def _sqlite_catalog_file(catalog_uri: str) -> Path | None:
    """The SQLite file of an embedded catalog's ``jdbc:sqlite:PATH``; ``None`` for a server."""
    prefix = "jdbc:sqlite:"
    return Path(catalog_uri.removeprefix(prefix)) if catalog_uri.startswith(prefix) else None


def check_catalog(settings: PipelineSettings) -> Finding:
    """The embedded Iceberg catalog reads, and every table's metadata file is in the warehouse."""
    uri = settings.catalog_uri or settings.layout.catalog_uri
    catalog = _sqlite_catalog_file(uri)
    if catalog is None:
        return Finding("catalog", True, f"{uri} (a catalog server: not checked here)")
    if not catalog.exists():
        return Finding("catalog", True, f"none yet at {catalog}: the first flush creates it")
    fix = f"restore {settings.layout.warehouse_dir} from a backup, or start a new --data-dir"
    try:
        with contextlib.closing(
            sqlite3.connect(f"{catalog.as_uri()}?mode=ro", uri=True, timeout=5)
        ) as conn:
            tables = conn.execute(
                "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables"
            ).fetchall()
    except sqlite3.Error as exc:
        return Finding("catalog", False, f"{catalog}: {exc}", fix)
    lost = [
        f"{namespace}.{name}"
        for namespace, name, location in tables
        if location
        and urlparse(location).scheme in ("", "file")
        and not Path(unquote(urlparse(location).path)).exists()
    ]
    if lost:
        return Finding(
            "catalog", False, f"{catalog}: metadata files missing for {', '.join(lost)}", fix
        )
    return Finding("catalog", True, f"{catalog} ({len(tables)} tables)")


def _reach(url: str) -> None:
    """Connect to a destination database once (5 s connect timeout)."""
    from ..adapters.sql import SqlAdapter

    parsed = make_url(url.replace("postgresql://", "postgresql+psycopg://", 1))
    if "connect_timeout" not in parsed.query:
        parsed = parsed.update_query_dict({"connect_timeout": "5"})
    adapter = SqlAdapter.connect(parsed.render_as_string(hide_password=False))
    try:
        with adapter.engine.connect():
            pass
    finally:
        adapter.close()


def check_destinations(settings: PipelineSettings) -> list[Finding]:
    """Every declared destination: database servers answer, SQLite files have a folder."""
    from ..declarations import expand_env, load_declarations

    defs = settings.resolved_defs_dir
    try:
        declarations = load_declarations(defs)
    except LakeSyncError as exc:
        return [Finding("declarations", False, exc.message, f"fix the YAML in {defs}")]
    findings = []
    for gw, decl in declarations.gateways.items():
        for dest in decl.destinations.values():
            check = f"destination {gw}/{dest.name}"
            if dest.kind == "bigquery":
                findings.append(_check_bigquery(check, dest, settings))
                continue
            url = expand_env(dest.url or "", settings.expansion_env)
            shown = make_url(url).render_as_string(hide_password=True)
            if dest.kind == "sqlite":
                database = make_url(url).database or ""
                folder = Path(database).parent
                if folder.is_dir():
                    findings.append(Finding(check, True, shown))
                else:
                    findings.append(
                        Finding(check, False, f"{shown}: no folder {folder}", f"mkdir -p {folder}")
                    )
                continue
            try:
                _reach(url)
            except (LakeSyncError, SQLAlchemyError) as exc:
                message = exc.message if isinstance(exc, LakeSyncError) else str(exc)
                first = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
                server = "PostgreSQL" if dest.kind == "postgres" else "MySQL/MariaDB"
                findings.append(
                    Finding(
                        check,
                        False,
                        f"{shown}: {first}",
                        f"start {server} at that address, or fix {dest.name!r}'s url in {defs}",
                    )
                )
            else:
                findings.append(Finding(check, True, f"{shown} answers"))
    return findings


def _check_bigquery(check: str, dest: DestinationDecl, settings: PipelineSettings) -> Finding:
    """A declared BigQuery dataset answers (opening the destination probes it once)."""
    from ..pipeline.context import open_destination

    where = f"{dest.project}.{dest.dataset}" + (f" at {dest.endpoint}" if dest.endpoint else "")
    try:
        open_destination(dest, settings.expansion_env).close()
    except Exception as exc:  # any client or transport error is the finding itself
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fix = f"check the credentials and {dest.name!r}'s project/dataset/endpoint in the YAML"
        return Finding(check, False, f"{where}: {first}", fix)
    return Finding(check, True, f"{where} answers")


def _platform_service(port: int) -> str | None:
    """What of the platform answers on ``port``: the Dagster UI or a LakeSync gateway."""
    base = f"http://127.0.0.1:{port}"
    with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
        if "dagster_webserver_version" in httpx.get(f"{base}/server_info", timeout=3).json():
            return "the Dagster UI"
    with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
        if httpx.get(f"{base}/health", timeout=3).json().get("status") == "ok":
            return "a LakeSync gateway"
    return None


def check_ports(ports: Iterable[tuple[str, int]], host: str = "127.0.0.1") -> list[Finding]:
    """The ports of ``lakesync dev`` are free, or served by the platform itself."""
    findings = []
    for flag, port in ports:
        check = f"port {port}"
        if not _taken(port, host):
            findings.append(Finding(check, True, "free"))
        elif (service := _platform_service(port)) is not None:
            findings.append(Finding(check, True, f"{service} answers here (already running)"))
        else:
            owner = port_owner(port) or "another process"
            findings.append(
                Finding(
                    check,
                    False,
                    f"in use by {owner}",
                    f"stop it, or choose another port with lakesync dev {flag} N",
                )
            )
    return findings


def diagnose(
    settings: PipelineSettings, ports: Iterable[tuple[str, int]], env: Mapping[str, str]
) -> list[Finding]:
    """Every check of ``lakesync doctor``, in the order a newcomer meets them."""
    if not settings.data_dir.is_dir():
        data = settings.data_dir.resolve()
        missing = Finding(
            "data directory",
            False,
            f"no data directory {data}",
            f"lakesync setup --data-dir {data} (or pass the right --data-dir)",
        )
        return [check_java(env), missing, *check_ports(ports)]
    return [
        check_java(env),
        check_jars(settings),
        check_wal(settings),
        check_catalog(settings),
        *check_destinations(settings),
        *check_ports(ports),
    ]
