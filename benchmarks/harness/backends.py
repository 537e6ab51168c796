"""Throwaway WAL databases for benchmarks: a new SQLite file or a new Postgres database per
measurement, dropped afterwards.

Postgres databases are named ``lakesync_bench_<pid>_<label>_<hex>`` (:data:`RUN_PREFIX`), so
concurrent runs never touch each other's databases and leftovers of dead runs can be dropped.
This module imports nothing of the product.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

PG_DB_PREFIX = "lakesync_bench"
RUN_PREFIX = f"{PG_DB_PREFIX}_{os.getpid()}"
"""This run's databases: ``lakesync_bench_<pid>_<label>_<hex>``."""


class Backend:
    """A kind of WAL database the benchmark can create and drop."""

    name = ""

    def fresh(self, label: str) -> str:
        """A new, empty database; returns its URL."""
        raise NotImplementedError

    def drop(self, url: str) -> None:
        """Delete the database at ``url``."""
        raise NotImplementedError

    def analyze(self, url: str) -> None:
        """Refresh the planner's statistics (what autovacuum would do), if the backend has
        any."""


class SqliteBackend(Backend):
    """A SQLite WAL file in its own directory under ``workdir``."""

    name = "sqlite"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def fresh(self, label: str) -> str:
        """A new directory holding ``wal.db`` (created by the first opener)."""
        d = self.workdir / f"sqlite-{label}-{uuid.uuid4().hex[:6]}"
        d.mkdir(parents=True)
        return f"sqlite:///{d / 'wal.db'}"

    @staticmethod
    def path(url: str) -> Path:
        """The file of a ``sqlite:///`` URL."""
        return Path(url[len("sqlite:///") :])

    def drop(self, url: str) -> None:
        """Delete the WAL's directory."""
        shutil.rmtree(self.path(url).parent, ignore_errors=True)


def libpq_url(url: str) -> str:
    """``url`` without a SQLAlchemy driver suffix (``postgresql+psycopg://`` ->
    ``postgresql://``), as psycopg takes it."""
    scheme, sep, rest = url.partition("://")
    return scheme.split("+", 1)[0] + sep + rest


class PostgresBackend(Backend):
    """New databases on the server of ``admin_url`` (a superuser's; the URLs returned keep its
    scheme, so a SQLAlchemy URL gives SQLAlchemy URLs)."""

    name = "postgres"

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.psycopg = psycopg
        self.admin_url = admin_url
        self.base = admin_url.rsplit("/", 1)[0]
        with self._admin() as conn:
            conn.execute("select 1")

    def _admin(self) -> Any:
        return self.psycopg.connect(libpq_url(self.admin_url), autocommit=True)

    def fresh(self, label: str) -> str:
        """``CREATE DATABASE lakesync_bench_<pid>_<label>_<hex>``."""
        name = f"{RUN_PREFIX}_{label}_{uuid.uuid4().hex[:6]}".lower().replace("-", "_")
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.base}/{name}"

    def drop(self, url: str) -> None:
        """``DROP DATABASE … WITH (FORCE)``."""
        name = url.rsplit("/", 1)[1]
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_leftovers(self) -> None:
        """Drop this run's databases and those of benchmark runs that are no longer alive."""
        with self._admin() as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "select datname from pg_database where datname like %s", (PG_DB_PREFIX + "_%",)
                )
            ]
            for name in names:
                pid = name[len(PG_DB_PREFIX) + 1 :].split("_", 1)[0]
                if not pid.isdigit():
                    continue  # not ours
                if int(pid) == os.getpid() or not Path(f"/proc/{pid}").exists():
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def analyze(self, url: str) -> None:
        """``ANALYZE`` the whole database."""
        with self.psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("ANALYZE")
