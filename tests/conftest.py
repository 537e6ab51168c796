"""Fixtures shared by every test folder: a throwaway PostgreSQL database for the session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

PG_ADMIN_DSN = os.environ.get(
    "LAKESYNC_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database (dropped afterwards) as an SQLAlchemy URL."""
    name = f"lakesync_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.fixture
def gw() -> str:
    """A gateway id unique to the test (tests sharing a database stay isolated)."""
    return f"gw_{uuid.uuid4().hex[:12]}"
