"""Connector configurations: the pure model of what a connector polls (PROTOCOL.md §11.1).

A connector is registered as ``ConnectorConfig`` JSON (the admin route's body, a YAML
``connectors:`` entry)::

    {"name": "crm", "type": "postgres", "schedule": "*/5 * * * *",
     "postgres": {"connectionString": "postgresql://app:${CRM_PASSWORD}@db/crm"},
     "ingest": {"chunkSize": 500, "tables": [
        {"table": "customers", "sourceTable": "customers", "rowIdColumn": "id",
         "strategy": {"type": "cursor", "cursorColumn": "updated_at", "lookbackMs": 5000}},
        {"table": "orders", "query": "SELECT * FROM orders WHERE region = 'eu'",
         "strategy": {"type": "diff"}}]}}

:func:`parse_connector_config` checks it whole and raises :class:`ValidationError` naming the
path of the offending value (msgspec's format, `` - at `$.ingest.tables[0]` ``). Secrets are
only ever ``${VAR}`` references to the environment of the process that runs the poll: a secret
field holding anything else, or a connection string with a literal password, is refused, so
the config store never holds a secret. :func:`masked_connector_json` is what an API returns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec
from croniter import croniter

from .delta import check_identifier
from .errors import SchemaError, ValidationError

__all__ = [
    "CONNECTOR_TYPES",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_SCHEDULE",
    "MASK",
    "SECRET_FIELDS",
    "SQL_TYPES",
    "ConnectorConfig",
    "CursorStrategy",
    "DiffStrategy",
    "IngestConfig",
    "SqlTable",
    "connector_config_to_json",
    "env_reference",
    "masked_connector_json",
    "parse_connector_config",
    "resolve_secrets",
]

CONNECTOR_TYPES: Final = ("postgres", "mysql", "bigquery", "jira", "salesforce")
"""The reference's connector types (``bigquery`` is registered but never polled)."""
SQL_TYPES: Final = ("postgres", "mysql")
"""Types whose ``ingest.tables`` are polled by the SQL source."""
DEFAULT_SCHEDULE: Final = "*/5 * * * *"
"""When a connector without ``schedule`` is polled (cron, UTC)."""
DEFAULT_CHUNK_SIZE: Final = 500
"""Deltas per append (the reference's ``chunkSize``)."""
MASK: Final = "********"
"""What a masked secret reads as."""

_REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    "postgres": ("connectionString",),
    "mysql": ("connectionString",),
    "bigquery": ("projectId", "dataset"),
    "jira": ("domain", "email", "apiToken"),
    "salesforce": ("instanceUrl", "clientId", "clientSecret", "username", "password"),
}
SECRET_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "jira": ("apiToken",),
    "salesforce": ("clientSecret", "password", "refreshToken"),
    "bigquery": ("credentialsJson",),
}
"""Per type, the fields that must be ``${VAR}`` references (connection strings: the password)."""
_REF_RE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class CursorStrategy(msgspec.Struct, forbid_unknown_fields=True, rename="camel", tag="cursor"):
    """Rows whose ``cursor_column`` is greater than the last seen value minus ``lookback_ms``."""

    cursor_column: str
    lookback_ms: int = 5000


class DiffStrategy(msgspec.Struct, forbid_unknown_fields=True, tag="diff"):
    """The whole source compared with the previous snapshot (a Spark job)."""


class SqlTable(msgspec.Struct, forbid_unknown_fields=True, rename="camel", omit_defaults=True):
    """One polled table: rows of ``source_table`` (default ``table``) or of ``query``, written
    into the gateway's table ``table`` keyed by ``row_id_column``."""

    table: str
    strategy: CursorStrategy | DiffStrategy
    query: str | None = None
    source_table: str | None = None
    row_id_column: str = "id"

    @property
    def source_sql(self) -> str:
        """The ``FROM`` target: ``(query) AS _src`` or the source table's name."""
        if self.query is not None:
            return f"({self.query}) AS _src"
        return self.source_table or self.table


class IngestConfig(msgspec.Struct, forbid_unknown_fields=True, rename="camel", omit_defaults=True):
    """What a SQL connector polls; ``interval_ms`` and ``memory_budget_bytes`` are accepted for
    the reference's bodies (the schedule decides when polls run)."""

    tables: list[SqlTable] = msgspec.field(default_factory=list)
    chunk_size: int = DEFAULT_CHUNK_SIZE
    interval_ms: int | None = None
    memory_budget_bytes: int | None = None


class ConnectorConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """A validated connector: ``source`` is the ``<type>`` object as given (secrets as
    references), ``ingest`` its polling plan."""

    name: str
    type: str
    source: dict[str, Any]
    ingest: IngestConfig | None = None
    schedule: str = DEFAULT_SCHEDULE

    @property
    def client_id(self) -> str:
        """The WAL client id its changes are written as."""
        return f"ingest:{self.name}"


class _Body(msgspec.Struct, forbid_unknown_fields=False):
    name: str
    type: str
    ingest: IngestConfig | None = None
    schedule: str = DEFAULT_SCHEDULE


def _fail(path: str, message: str) -> ValidationError:
    return ValidationError(f"{message} - at `{path}`")


def env_reference(value: object) -> str | None:
    """The variable name if ``value`` is exactly ``${VAR}``, else ``None``."""
    if isinstance(value, str):
        match = _REF_RE.fullmatch(value)
        if match:
            return match.group(1)
    return None


def _check_schedule(cron: str) -> None:
    if len(cron.split()) != 5 or not croniter.is_valid(cron):
        raise _fail("$.schedule", f"schedule {cron!r} must be a cron expression of 5 fields")


def _check_secrets(kind: str, source: Mapping[str, Any]) -> None:
    for key in SECRET_FIELDS.get(kind, ()):
        if key in source and env_reference(source[key]) is None:
            raise _fail(
                f"$.{kind}.{key}",
                f"{key} must be a ${{VAR}} reference to the environment, never the secret itself",
            )
    url = source.get("connectionString")
    if kind in SQL_TYPES:
        if not isinstance(url, str) or not url:
            raise _fail(f"$.{kind}.connectionString", "connectionString must be a non-empty string")
        if env_reference(url) is None:
            password = urlsplit(_REF_RE.sub("x", url)).password
            literal = urlsplit(url).password
            if password and env_reference(literal) is None:
                raise _fail(
                    f"$.{kind}.connectionString",
                    "the password in connectionString must be a ${VAR} reference",
                )


def _check_tables(kind: str, ingest: IngestConfig) -> None:
    if kind in SQL_TYPES and not ingest.tables:
        raise _fail("$.ingest.tables", "ingest.tables must list at least one table")
    if ingest.chunk_size < 1:
        raise _fail("$.ingest.chunkSize", "chunkSize must be a positive integer")
    if ingest.interval_ms is not None and ingest.interval_ms < 1:
        raise _fail("$.ingest.intervalMs", "intervalMs must be a positive integer")
    seen: set[str] = set()
    for i, tbl in enumerate(ingest.tables):
        path = f"$.ingest.tables[{i}]"
        try:
            check_identifier(tbl.table, "table")
            check_identifier(tbl.row_id_column, "column")
            if tbl.source_table is not None:
                for part in tbl.source_table.split("."):
                    check_identifier(part, "table")
            if isinstance(tbl.strategy, CursorStrategy):
                check_identifier(tbl.strategy.cursor_column, "column")
        except SchemaError as exc:
            raise _fail(path, exc.message) from exc
        if tbl.query is not None and tbl.source_table is not None:
            raise _fail(path, "give either query or sourceTable, not both")
        if tbl.query is not None and not tbl.query.strip():
            raise _fail(f"{path}.query", "query must not be empty")
        if isinstance(tbl.strategy, CursorStrategy) and tbl.strategy.lookback_ms < 0:
            raise _fail(f"{path}.strategy.lookbackMs", "lookbackMs must be 0 or more")
        if tbl.table in seen:
            raise _fail(f"{path}.table", f"table {tbl.table!r} is polled twice")
        seen.add(tbl.table)


def parse_connector_config(obj: object) -> ConnectorConfig:
    """Validate a ``ConnectorConfig`` body; raise :class:`ValidationError` naming the path."""
    if not isinstance(obj, Mapping):
        raise ValidationError("Connector config must be an object")
    try:
        body = msgspec.convert(obj, _Body)
    except msgspec.ValidationError as exc:
        message = str(exc)
        raise ValidationError(message if " - at `" in message else f"{message} - at `$`") from exc
    try:
        check_identifier(body.name, "connector")
    except SchemaError as exc:
        raise _fail("$.name", exc.message) from exc
    if body.type not in CONNECTOR_TYPES:
        raise _fail("$.type", f"type must be one of {', '.join(CONNECTOR_TYPES)}")
    source = obj.get(body.type)
    if not isinstance(source, Mapping):
        raise _fail(f"$.{body.type}", f'Connector type "{body.type}" requires a {body.type} config')
    for key in _REQUIRED[body.type]:
        value = source.get(key)
        if not isinstance(value, str) or not value:
            raise _fail(f"$.{body.type}.{key}", f"{key} is required (a non-empty string)")
    extra = set(obj) - {"name", "type", "ingest", "schedule", body.type}
    if extra:
        raise _fail("$", f"unknown field(s) {sorted(extra)}")
    _check_secrets(body.type, source)
    _check_schedule(body.schedule)
    if body.type in SQL_TYPES and body.ingest is None:
        raise _fail("$.ingest", f"a {body.type} connector needs ingest.tables to poll")
    if body.ingest is not None:
        _check_tables(body.type, body.ingest)
    return ConnectorConfig(body.name, body.type, dict(source), body.ingest, body.schedule)


def connector_config_to_json(cfg: ConnectorConfig) -> dict[str, Any]:
    """The config as registered (secrets as their ``${VAR}`` references)."""
    out: dict[str, Any] = {"name": cfg.name, "type": cfg.type, cfg.type: dict(cfg.source)}
    if cfg.ingest is not None:
        out["ingest"] = msgspec.to_builtins(cfg.ingest)
    out["schedule"] = cfg.schedule
    return out


def masked_connector_json(cfg: ConnectorConfig) -> dict[str, Any]:
    """:func:`connector_config_to_json` with every secret field and password shown as
    :data:`MASK` (what the admin API returns)."""
    out = connector_config_to_json(cfg)
    source = out[cfg.type]
    for key in SECRET_FIELDS.get(cfg.type, ()):
        if key in source:
            source[key] = MASK
    url = source.get("connectionString")
    if isinstance(url, str):
        source["connectionString"] = _mask_url(url)
    return out


def _mask_url(url: str) -> str:
    if env_reference(url) is not None:
        return MASK
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{user}:{MASK}@{host}").geturl()


def resolve_secrets(value: str, env: Mapping[str, str]) -> str:
    """``value`` with every ``${VAR}`` replaced from ``env``; an unset variable is a
    :class:`ValidationError` naming the variable (never its value)."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ValidationError(f"environment variable {name} is not set")
        return env[name]

    return _REF_RE.sub(sub, value)
