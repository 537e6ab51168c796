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
    "HTTP_TYPES",
    "MASK",
    "POLLED_TYPES",
    "SALESFORCE_DEFAULT_OBJECTS",
    "SECRET_FIELDS",
    "SQL_TYPES",
    "ConnectorConfig",
    "CursorStrategy",
    "DiffStrategy",
    "IngestConfig",
    "JiraOptions",
    "SalesforceObject",
    "SalesforceOptions",
    "SqlTable",
    "connector_config_to_json",
    "env_reference",
    "jira_options",
    "masked_connector_json",
    "parse_connector_config",
    "resolve_secrets",
    "salesforce_options",
    "salesforce_table",
]

CONNECTOR_TYPES: Final = ("postgres", "mysql", "bigquery", "jira", "salesforce")
"""The reference's connector types (``bigquery`` is registered but never polled)."""
SQL_TYPES: Final = ("postgres", "mysql")
"""Types whose ``ingest.tables`` are polled by the SQL source."""
HTTP_TYPES: Final = ("jira", "salesforce")
"""Types polled over their REST APIs (their options: :class:`JiraOptions`,
:class:`SalesforceOptions`)."""
POLLED_TYPES: Final = SQL_TYPES + HTTP_TYPES
"""Types the pipeline polls (``bigquery`` is registered as a pull source only)."""
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
    "salesforce": ("instanceUrl", "clientId"),
}
_SALESFORCE_FLOW_REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    "password": ("clientSecret", "username", "password"),
    "client_credentials": ("clientSecret",),
    "refresh_token": ("refreshToken",),
}
"""What each OAuth flow needs besides ``instanceUrl`` and ``clientId`` (the reference's password
flow needs the reference's five fields)."""
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


class JiraOptions(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """The ``jira`` object of a Jira Cloud connector.

    ``jql`` filters the issues (no ``ORDER BY``: the poll orders by ``updated``);
    ``custom_fields`` names the custom fields to keep, by id or name (``None``: all of them);
    every ``census_every`` runs an id-only sweep turns vanished issues, comments and projects
    into deletes (0: never). ``base_url`` replaces ``https://<domain>.atlassian.net`` (a proxy,
    a test server).
    """

    domain: str
    email: str
    api_token: str
    base_url: str | None = None
    jql: str = ""
    lookback_ms: int = 60_000
    page_size: int = 100
    include_comments: bool = True
    include_projects: bool = True
    custom_fields: list[str] | None = None
    census_every: int = 12

    @property
    def url(self) -> str:
        """The site's base URL."""
        return (self.base_url or f"https://{self.domain}.atlassian.net").rstrip("/")


class SalesforceObject(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """One polled sObject: its API name, the gateway table (default ``sf_<name>``, the
    reference's plural for the four standard objects) and an optional SOQL ``WHERE`` filter."""

    name: str
    table: str | None = None
    soql_filter: str | None = None


SALESFORCE_DEFAULT_OBJECTS: Final = ("Account", "Contact", "Opportunity", "Lead")
"""The sObjects a Salesforce connector polls when ``objects`` is not given."""


class SalesforceOptions(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """The ``salesforce`` object of a Salesforce connector.

    ``auth_flow`` is the OAuth flow (``password`` as the reference, ``client_credentials`` or
    ``refresh_token``); ``login_url`` is where tokens come from (default
    ``https://login.salesforce.com``, ``https://test.salesforce.com`` when ``is_sandbox``, the
    instance itself for client credentials). A run stops cleanly once the org's daily API use
    reaches ``quota_share`` of its allowance; a first load of an object holding more than
    ``bulk_threshold`` records goes through the Bulk API 2.0 (0: never).
    """

    instance_url: str
    client_id: str
    client_secret: str | None = None
    username: str | None = None
    password: str | None = None
    refresh_token: str | None = None
    auth_flow: str = "password"
    login_url: str | None = None
    is_sandbox: bool = False
    api_version: str = "v62.0"
    objects: list[str | SalesforceObject] | None = None
    lookback_ms: int = 60_000
    quota_share: float = 0.8
    bulk_threshold: int = 50_000
    census_every: int = 12

    def polled(self) -> list[SalesforceObject]:
        """Every polled sObject (the four defaults when ``objects`` is not given)."""
        given = list(self.objects) if self.objects is not None else SALESFORCE_DEFAULT_OBJECTS
        return [o if isinstance(o, SalesforceObject) else SalesforceObject(o) for o in given]

    @property
    def token_url(self) -> str:
        """The OAuth token endpoint."""
        if self.login_url:
            base = self.login_url
        elif self.auth_flow == "client_credentials":
            base = self.instance_url
        else:
            base = f"https://{'test' if self.is_sandbox else 'login'}.salesforce.com"
        return base.rstrip("/") + "/services/oauth2/token"


def jira_options(cfg: ConnectorConfig) -> JiraOptions:
    """The typed ``jira`` object of a validated Jira connector."""
    return msgspec.convert(cfg.source, JiraOptions)


def salesforce_options(cfg: ConnectorConfig) -> SalesforceOptions:
    """The typed ``salesforce`` object of a validated Salesforce connector."""
    return msgspec.convert(cfg.source, SalesforceOptions)


_OPTIONS: Final[Mapping[str, type[msgspec.Struct]]] = {
    "jira": JiraOptions,
    "salesforce": SalesforceOptions,
}
_IDENT_PART: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _check_http_options(kind: str, source: Mapping[str, Any]) -> None:
    """The typed checks of a Jira or Salesforce object (unknown keys, types, ranges)."""
    try:
        opts = msgspec.convert(source, _OPTIONS[kind])
    except msgspec.ValidationError as exc:
        message, sep, inner = str(exc).partition(" - at `$")
        raise _fail(f"$.{kind}{inner.rstrip('`')}" if sep else f"$.{kind}", message) from exc
    where = f"$.{kind}"
    for key in ("lookbackMs", "censusEvery"):
        if getattr(opts, _snake(key)) < 0:
            raise _fail(f"{where}.{key}", f"{key} must be 0 or more")
    if isinstance(opts, JiraOptions):
        if not 1 <= opts.page_size <= 100:
            raise _fail(f"{where}.pageSize", "pageSize must be between 1 and 100")
        if re.search(r"\border\s+by\b", opts.jql, re.IGNORECASE):
            raise _fail(
                f"{where}.jql", "jql is a filter: leave ORDER BY out (polls order by updated)"
            )
        return
    assert isinstance(opts, SalesforceOptions)
    if opts.auth_flow not in _SALESFORCE_FLOW_REQUIRED:
        raise _fail(
            f"{where}.authFlow", f"authFlow must be one of {', '.join(_SALESFORCE_FLOW_REQUIRED)}"
        )
    for key in _SALESFORCE_FLOW_REQUIRED[opts.auth_flow]:
        value = source.get(key)
        if not isinstance(value, str) or not value:
            raise _fail(f"{where}.{key}", f"{key} is required (a non-empty string)")
    if not 0 < opts.quota_share <= 1:
        raise _fail(f"{where}.quotaShare", "quotaShare must be more than 0 and at most 1")
    if opts.bulk_threshold < 0:
        raise _fail(f"{where}.bulkThreshold", "bulkThreshold must be 0 or more")
    tables: set[str] = set()
    for i, obj in enumerate(opts.polled()):
        if _IDENT_PART.fullmatch(obj.name) is None:
            raise _fail(f"{where}.objects[{i}]", f"{obj.name!r} is not an sObject API name")
        table = obj.table or salesforce_table(obj.name)
        try:
            check_identifier(table, "table")
        except SchemaError as exc:
            raise _fail(f"{where}.objects[{i}]", exc.message) from exc
        if table in tables:
            raise _fail(f"{where}.objects[{i}]", f"table {table!r} is polled twice")
        tables.add(table)


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


_SALESFORCE_TABLES: Final[Mapping[str, str]] = {
    "Account": "sf_accounts",
    "Contact": "sf_contacts",
    "Opportunity": "sf_opportunities",
    "Lead": "sf_leads",
}


def salesforce_table(sobject: str) -> str:
    """The gateway table of an sObject: the reference's names for the four standard objects,
    ``sf_<snake_case name>`` for any other (``Invoice__c`` → ``sf_invoice__c``)."""
    return _SALESFORCE_TABLES.get(sobject) or ("sf_" + _snake(sobject))[:64]


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
    if body.type in _OPTIONS:
        _check_http_options(body.type, source)
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
