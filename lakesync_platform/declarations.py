"""Declarative pipeline config: YAML files in a folder (``--defs DIR`` / ``LAKESYNC_DEFS_DIR``).

Every ``*.yaml`` / ``*.yml`` file in the folder (sorted by name) declares, for one gateway::

    gateway: demo                 # gateway id (= lake namespace); default "default"
    tables:                       # table schemas, exactly the admin route's TableSchema JSON
      - table: todos
        columns:
          - {name: title, type: string}
          - {name: done, type: boolean}
        softDelete: true
    destinations:                 # where state is materialised
      - name: warehouse           # identifier; the Dagster asset is <gateway>/<name>/<table>
        kind: postgres            # postgres | mysql | sqlite | bigquery
        url: postgresql+psycopg://app@db:5432/analytics   # ${VAR} is read from the environment
        tables: [todos]           # optional; default: every table of the gateway ("*")
        role: primary             # optional: primary (default; its failure fails the run) or
                                  # best_effort (retried; a failure is reported, the run goes on)
      - name: analytics
        kind: bigquery            # credentials: Application Default Credentials
        project: ${GOOGLE_CLOUD_PROJECT}
        dataset: lakesync         # created on first use
        location: EU              # optional; the dataset's location
        endpoint: http://127.0.0.1:9050   # optional: an emulator (anonymous credentials)
    actions:                      # connectors whose actions clients may run (PROTOCOL.md §8)
      - connector: alerts         # the name clients address; an identifier
        kind: webhook             # webhook: POST each action to url
        url: https://hooks.example.com/lakesync   # ${VAR} is read from the environment
        headers: {Authorization: "Bearer ${HOOK_TOKEN}"}   # optional
        timeoutSeconds: 5         # optional (default 5); retries: 2 (default)
        types:                    # the action types, by name
          notify:
            description: Post a message to the team channel
            params:               # optional (absent: any object); each one's JSON type
              text: {type: string}
              urgent: {type: boolean, required: false, description: page the on-call}
      - connector: todo_ops
        kind: sql                 # sql: run a declared statement
        destination: warehouse    # a destination of this gateway (or url: …)
        types:
          close_todo:
            description: Mark a todo done in the warehouse
            statement: UPDATE todos SET completed = TRUE WHERE row_id = :row_id
            params:
              row_id: {type: string}
    sources:                      # stores clients pull from: GET …/pull?source=<name>
      - name: crm                 # identifier, unique per gateway
        kind: postgres            # postgres | mysql | bigquery (holding lakesync_deltas) | lake
        url: postgresql+psycopg://app@db:5432/crm         # ${VAR} is read from the environment
        options: {}               # the kind's own settings (strings; ${VAR} too): lake needs
                                  # warehouse and namespace, its url is the Iceberg catalog's
    syncRules:                    # the gateway's sync rules, exactly the admin route's body
      buckets:
        - {name: mine, tables: [todos], filters: [{column: owner, op: eq, value: "jwt:sub"}]}
    connectors:                   # sources polled into the WAL, exactly the admin route's body
      - name: shop
        type: postgres
        postgres: {connectionString: "postgresql://app:${SHOP_PASSWORD}@db/shop"}
        schedule: "*/5 * * * *"
        ingest:
          tables:
            - {table: items, rowIdColumn: id, strategy: {type: cursor, cursorColumn: updated_at}}

Several files may declare the same gateway; their tables and destinations add up (a table or
destination declared twice is an error). Routing: each destination receives the tables it
lists; a table listed by several destinations fans out to all of them. A gateway with a
``best_effort`` destination must declare a ``primary`` one: a best-effort destination's lag is
measured against the primary destinations covering the same table. A file is read into
msgspec structs, so a misspelt key or a value of the wrong type is refused with the file and
the path of the value (``x.yaml: Object contains unknown field `tabels` - at `$```); the
gateway id follows the platform's rule
(:func:`~lakesync_platform.core.identifiers.check_gateway_id`). Sync rules and connectors
are checked by the admin routes' own parsers
(:func:`~lakesync_platform.core.sync_rules.parse_sync_rules`,
:func:`~lakesync_platform.core.connectors.parse_connector_config`), their messages prefixed
with the file and the path (``x.yaml: … - at `$.connectors[0].ingest.tables[0]```). A
connector's secrets are ``${VAR}`` references, kept as written: they are resolved only by the
process that runs a poll, from its environment.

An action connector's kind, URL or destination, and its types' statements are checked here
(a ``sql`` type needs a ``statement``, a ``webhook`` type has none; a ``destination`` must be
declared for the gateway); the gateway builds the handlers from them at startup.

Declarations are applied to the gateway's config store (:func:`apply_declarations`), which
stays the runtime source of truth: a table registered only through ``POST /v1/admin/schema``
flows through the pipeline like a declared one, and reaches every destination whose ``tables``
is ``"*"``. Declared sync rules are saved exactly as the admin route saves posted ones (the
gateway enforces them within a second); declared connectors are (re-)registered, keeping
their cursors — applying declarations again restores a declared connector's config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Protocol

import msgspec
import yaml

from .core.actions import PARAM_TYPES, ActionDescriptor, ParamSpec, params_struct
from .core.connectors import ConnectorConfig, parse_connector_config
from .core.delta import check_identifier
from .core.errors import LakeSyncError, SchemaError, ValidationError
from .core.identifiers import check_gateway_id
from .core.schema import TableSchema, parse_table_schema
from .core.sync_rules import SyncRules, parse_sync_rules

__all__ = [
    "ACTION_KINDS",
    "DESTINATION_KINDS",
    "DESTINATION_ROLES",
    "SOURCE_KINDS",
    "ActionConnectorDecl",
    "ActionTypeDecl",
    "DeclarationError",
    "Declarations",
    "DestinationDecl",
    "GatewayDecl",
    "SourceDecl",
    "apply_declarations",
    "expand_env",
    "load_declarations",
    "parse_declarations",
]

DESTINATION_KINDS: Final = ("postgres", "mysql", "sqlite", "bigquery")
_BIGQUERY_KEYS: Final = ("project", "dataset", "location", "endpoint")
ACTION_KINDS: Final = ("webhook", "sql")
DESTINATION_ROLES: Final = ("primary", "best_effort")
"""``primary``: its failure fails the run; ``best_effort``: retried, its failure is reported."""
SOURCE_KINDS: Final = ("postgres", "mysql", "lake", "bigquery")
"""The source kinds a declaration may name (the keys of ``adapters.source.SOURCE_KINDS``)."""
SOURCE_OPTIONS: Final[Mapping[str, tuple[str, ...]]] = {"lake": ("warehouse", "namespace")}
"""The options each source kind requires."""
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DEFAULT_GATEWAY: Final = "default"


class DeclarationError(LakeSyncError):
    """A declaration file is malformed; the message names the file and the problem."""

    code = "DECLARATION_ERROR"


@dataclass(frozen=True, slots=True)
class DestinationDecl:
    """A destination: a SQL database at ``url`` or (``kind: bigquery``) a dataset of a Google
    Cloud project. String values may hold ``${VAR}`` references (expanded at run time)."""

    name: str
    kind: str
    url: str | None
    tables: tuple[str, ...] | None = None
    project: str | None = None
    dataset: str | None = None
    location: str | None = None
    endpoint: str | None = None
    role: str = "primary"

    @property
    def primary(self) -> bool:
        """Whether a failure to write this destination fails the run."""
        return self.role == "primary"

    def covers(self, table: str) -> bool:
        """Whether this destination receives ``table`` (``tables`` unset = every table)."""
        return self.tables is None or table in self.tables


@dataclass(frozen=True, slots=True)
class ActionTypeDecl:
    """An action type of a declared connector: its params (``None``: any object) and, for a
    ``sql`` connector, its statement."""

    action_type: str
    description: str
    params: Mapping[str, ParamSpec] | None
    statement: str | None = None

    def descriptor(self, connector: str) -> ActionDescriptor:
        """The type as the registry describes it (its params as a struct type)."""
        params = self.params
        struct = (
            None if params is None else params_struct(f"{connector}.{self.action_type}", params)
        )
        return ActionDescriptor(self.action_type, self.description, struct)


@dataclass(frozen=True, slots=True)
class ActionConnectorDecl:
    """A declared action connector: ``url`` (``${VAR}`` expanded at startup) or, for ``sql``,
    the ``destination`` whose URL it uses."""

    connector: str
    kind: str
    types: Mapping[str, ActionTypeDecl]
    url: str | None = None
    destination: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 5.0
    retries: int = 2


@dataclass(frozen=True, slots=True)
class SourceDecl:
    """A source clients pull from (``pull?source=NAME``): ``url`` may hold ``${VAR}``."""

    name: str
    kind: str
    url: str
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GatewayDecl:
    """Everything declared for one gateway id."""

    gateway_id: str
    tables: Mapping[str, TableSchema] = field(default_factory=dict)
    destinations: Mapping[str, DestinationDecl] = field(default_factory=dict)
    actions: Mapping[str, ActionConnectorDecl] = field(default_factory=dict)
    sync_rules: SyncRules | None = None
    connectors: Mapping[str, ConnectorConfig] = field(default_factory=dict)
    sources: Mapping[str, SourceDecl] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Declarations:
    """All declarations of a folder, by gateway id."""

    gateways: Mapping[str, GatewayDecl] = field(default_factory=dict)

    def gateway(self, gw: str) -> GatewayDecl:
        """The declarations of ``gw`` (empty when nothing is declared for it)."""
        return self.gateways.get(gw) or GatewayDecl(gw)


class SchemaStore(Protocol):
    """The config-store part of the WAL that declarations are applied to."""

    def save_schema(self, gw: str, schema: TableSchema, now_ms: int = 0) -> TableSchema:
        """Register or evolve a schema."""
        ...

    def save_sync_rules(self, gw: str, rules: SyncRules, now_ms: int = 0) -> None:
        """Replace the gateway's sync rules."""
        ...

    def save_connector(
        self, gw: str, cfg: ConnectorConfig, now_ms: int = 0, *, replace: bool = False
    ) -> None:
        """Register (or with ``replace``, re-register) a connector."""
        ...


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """Replace ``${VAR}`` by ``env["VAR"]``; an unset variable is a :class:`DeclarationError`."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise DeclarationError(f"environment variable {name} is not set (used in {text!r})")
        return env[name]

    return _ENV_RE.sub(sub, text)


class _Destination(msgspec.Struct, forbid_unknown_fields=True):
    """A destination as written; names and kind are checked after conversion."""

    name: str
    kind: str
    url: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    tables: list[str] | Literal["*"] | None = "*"
    project: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    dataset: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    location: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    endpoint: Annotated[str, msgspec.Meta(min_length=1)] | None = None

    role: str = "primary"


class _Param(msgspec.Struct, forbid_unknown_fields=True):
    """An action parameter as written."""

    type: str
    required: bool = True
    description: str | None = None


class _ActionType(msgspec.Struct, forbid_unknown_fields=True):
    """An action type as written."""

    description: str = ""
    params: dict[str, _Param] | None = None
    statement: Annotated[str, msgspec.Meta(min_length=1)] | None = None


class _ActionConnector(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """An action connector as written."""

    connector: str
    kind: str
    types: dict[str, _ActionType]
    url: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    destination: str | None = None
    headers: dict[str, str] | None = None
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] = 5.0
    retries: Annotated[int, msgspec.Meta(ge=0)] = 2


class _Source(msgspec.Struct, forbid_unknown_fields=True):
    """A source as written; name and kind are checked after conversion."""

    name: str
    kind: str
    url: Annotated[str, msgspec.Meta(min_length=1)]
    options: dict[str, str] | None = None


class _Document(msgspec.Struct, forbid_unknown_fields=True):
    """One declaration file as written. Tables stay raw: :func:`parse_table_schema` checks them
    with the admin route's messages."""

    gateway: str = DEFAULT_GATEWAY
    tables: list[Any] | None = None
    destinations: list[_Destination] | None = None
    actions: list[_ActionConnector] | None = None
    sync_rules: Any = msgspec.field(default=None, name="syncRules")
    connectors: list[Any] | None = None
    sources: list[_Source] | None = None


def _error(where: str, path: str, message: str) -> DeclarationError:
    """The error for ``message`` about ``path`` of file ``where``, in msgspec's format."""
    return DeclarationError(f"{where}: {message} - at `{path}`")


def _read_document(where: str, doc: object) -> _Document:
    try:
        parsed = msgspec.convert(doc, _Document)
    except msgspec.ValidationError as exc:
        message = str(exc)  # msgspec names the path, except the document's own (``$``)
        raise DeclarationError(
            f"{where}: {message}" if " - at `" in message else f"{where}: {message} - at `$`"
        ) from exc
    try:
        check_gateway_id(parsed.gateway)
    except ValidationError as exc:
        raise _error(where, "$.gateway", exc.message) from exc
    return parsed


def _at(where: str, path: str, exc: ValidationError) -> DeclarationError:
    """``exc`` (whose message may end in `` - at `$…` ``) about the value at ``path``."""
    message, sep, inner = exc.message.partition(" - at `$")
    return _error(where, path + inner.rstrip("`") if sep else path, message)


def _connector(where: str, i: int, raw: Any) -> ConnectorConfig:
    try:
        return parse_connector_config(raw)
    except ValidationError as exc:
        raise _at(where, f"$.connectors[{i}]", exc) from exc


def _sync_rules(where: str, raw: Any) -> SyncRules:
    try:
        return parse_sync_rules(raw)
    except ValidationError as exc:
        raise _at(where, "$.syncRules", exc) from exc


def _destination(where: str, i: int, raw: _Destination) -> DestinationDecl:
    path = f"$.destinations[{i}]"
    try:
        name = check_identifier(raw.name, "destination")
    except SchemaError as exc:
        raise _error(where, f"{path}.name", exc.message) from exc
    if raw.kind not in DESTINATION_KINDS:
        raise _error(
            where, f"{path}.kind", f"destination {name!r} kind must be one of {DESTINATION_KINDS}"
        )
    if raw.kind == "bigquery":
        _check_bigquery(where, path, name, raw)
    else:
        if raw.url is None:
            raise _error(
                where, f"{path}.url", f"destination {name!r} of kind {raw.kind} needs a url"
            )
        for key in _BIGQUERY_KEYS:
            if getattr(raw, key) is not None:
                raise _error(
                    where, f"{path}.{key}", f"{key!r} applies to kind bigquery, not {raw.kind}"
                )
    if raw.role not in DESTINATION_ROLES:
        raise _error(
            where, f"{path}.role", f"destination {name!r} role must be one of {DESTINATION_ROLES}"
        )
    tables: list[str] | None = None
    if raw.tables is not None and raw.tables != "*":
        tables = []
        for j, table in enumerate(raw.tables):
            try:
                tables.append(check_identifier(table, "table"))
            except SchemaError as exc:
                raise _error(where, f"{path}.tables[{j}]", exc.message) from exc
    return DestinationDecl(
        name,
        raw.kind,
        raw.url,
        None if tables is None else tuple(tables),
        project=raw.project,
        dataset=raw.dataset,
        location=raw.location,
        endpoint=raw.endpoint,
        role=raw.role,
    )


def _check_bigquery(where: str, path: str, name: str, raw: _Destination) -> None:
    """A BigQuery destination names its project and dataset and no URL; the dataset is an
    identifier and the endpoint an http(s) URL (unless they are ``${VAR}`` references)."""
    if raw.url is not None:
        raise _error(
            where,
            f"{path}.url",
            f"destination {name!r} of kind bigquery takes project and dataset, not a url",
        )
    for key in ("project", "dataset"):
        if getattr(raw, key) is None:
            raise _error(
                where, f"{path}.{key}", f"destination {name!r} of kind bigquery needs a {key}"
            )
    if raw.dataset is not None and not _ENV_RE.search(raw.dataset):
        try:
            check_identifier(raw.dataset, "dataset")
        except SchemaError as exc:
            raise _error(where, f"{path}.dataset", exc.message) from exc
    endpoint = raw.endpoint
    if (
        endpoint is not None
        and not _ENV_RE.search(endpoint)
        and not endpoint.startswith(("http://", "https://"))
    ):
        raise _error(
            where, f"{path}.endpoint", f"endpoint must be an http(s) URL, not {endpoint!r}"
        )


def _action_type(where: str, path: str, kind: str, name: str, raw: _ActionType) -> ActionTypeDecl:
    try:
        check_identifier(name, "action type")
    except SchemaError as exc:
        raise _error(where, path, exc.message) from exc
    if (kind == "sql") != (raw.statement is not None):
        need = "needs a statement" if kind == "sql" else "takes no statement"
        raise _error(where, path, f"a {kind} action type {need}")
    params = None
    if raw.params is not None:
        params = {}
        for param, spec in raw.params.items():
            try:
                check_identifier(param, "parameter")
            except SchemaError as exc:
                raise _error(where, f"{path}.params.{param}", exc.message) from exc
            if spec.type not in PARAM_TYPES:
                raise _error(
                    where, f"{path}.params.{param}.type", f"must be one of {', '.join(PARAM_TYPES)}"
                )
            params[param] = ParamSpec(spec.type, spec.required, spec.description)
    return ActionTypeDecl(name, raw.description, params, raw.statement)


def _action_connector(where: str, i: int, raw: _ActionConnector) -> ActionConnectorDecl:
    path = f"$.actions[{i}]"
    try:
        name = check_identifier(raw.connector, "connector")
    except SchemaError as exc:
        raise _error(where, f"{path}.connector", exc.message) from exc
    if raw.kind not in ACTION_KINDS:
        raise _error(where, f"{path}.kind", f"action kind must be one of {ACTION_KINDS}")
    if raw.kind == "webhook" and (raw.url is None or raw.destination is not None):
        raise _error(where, path, "a webhook connector needs a url (and no destination)")
    if raw.kind == "sql" and (raw.url is None) == (raw.destination is None):
        raise _error(where, path, "a sql connector needs either a url or a destination")
    types = {
        t: _action_type(where, f"{path}.types.{t}", raw.kind, t, rt) for t, rt in raw.types.items()
    }
    return ActionConnectorDecl(
        name,
        raw.kind,
        types,
        raw.url,
        raw.destination,
        raw.headers or {},
        raw.timeout_seconds,
        raw.retries,
    )


def _source(where: str, i: int, raw: _Source) -> SourceDecl:
    path = f"$.sources[{i}]"
    try:
        name = check_identifier(raw.name, "source")
    except SchemaError as exc:
        raise _error(where, f"{path}.name", exc.message) from exc
    if raw.kind not in SOURCE_KINDS:
        raise _error(where, f"{path}.kind", f"source {name!r} kind must be one of {SOURCE_KINDS}")
    options = dict(raw.options or {})
    missing = [o for o in SOURCE_OPTIONS.get(raw.kind, ()) if not options.get(o)]
    if missing:
        raise _error(
            where, f"{path}.options", f"source {name!r} of kind {raw.kind} needs options {missing}"
        )
    return SourceDecl(name, raw.kind, raw.url, options)


def parse_declarations(documents: list[tuple[str, Any]]) -> Declarations:
    """Build :class:`Declarations` from parsed YAML documents ``(source name, document)``.

    A malformed document raises :class:`DeclarationError` naming the file and the path of the
    offending value (``x.yaml: Object contains unknown field `tabels` - at `$```).
    """
    tables: dict[str, dict[str, TableSchema]] = {}
    dests: dict[str, dict[str, DestinationDecl]] = {}
    actions: dict[str, dict[str, tuple[str, ActionConnectorDecl]]] = {}
    rules: dict[str, SyncRules] = {}
    connectors: dict[str, dict[str, ConnectorConfig]] = {}
    sources: dict[str, dict[str, SourceDecl]] = {}
    best_effort_at: dict[str, tuple[str, str]] = {}  # gw → (file, path) of its first one
    for where, doc in documents:
        if doc is None:
            continue
        parsed = _read_document(where, doc)
        gw = parsed.gateway
        for i, raw in enumerate(parsed.tables or []):
            try:
                schema = parse_table_schema(raw)
            except SchemaError as exc:
                raise _error(where, f"$.tables[{i}]", exc.message) from exc
            if schema.table in tables.setdefault(gw, {}):
                raise DeclarationError(f"{where}: table {schema.table!r} declared twice for {gw!r}")
            tables[gw][schema.table] = schema
        for i, raw_dest in enumerate(parsed.destinations or []):
            dest = _destination(where, i, raw_dest)
            if dest.name in dests.setdefault(gw, {}):
                raise DeclarationError(f"{where}: destination {dest.name!r} declared twice")
            dests[gw][dest.name] = dest
            if not dest.primary:
                best_effort_at.setdefault(gw, (where, f"$.destinations[{i}].role"))
        for i, raw_action in enumerate(parsed.actions or []):
            action = _action_connector(where, i, raw_action)
            if action.connector in actions.setdefault(gw, {}):
                raise DeclarationError(f"{where}: connector {action.connector!r} declared twice")
            actions[gw][action.connector] = (where, action)
        if parsed.sync_rules is not None:
            if gw in rules:
                raise DeclarationError(f"{where}: syncRules declared twice for {gw!r}")
            rules[gw] = _sync_rules(where, parsed.sync_rules)
        for i, raw_conn in enumerate(parsed.connectors or []):
            conn = _connector(where, i, raw_conn)
            if conn.name in connectors.setdefault(gw, {}):
                raise DeclarationError(f"{where}: connector {conn.name!r} declared twice")
            connectors[gw][conn.name] = conn
        for i, raw_source in enumerate(parsed.sources or []):
            source = _source(where, i, raw_source)
            if source.name in sources.setdefault(gw, {}):
                raise _error(
                    where, f"$.sources[{i}].name", f"source {source.name!r} declared twice"
                )
            sources[gw][source.name] = source
    for gw, declared in actions.items():
        for where, action in declared.values():
            if action.destination is not None and action.destination not in dests.get(gw, {}):
                raise DeclarationError(
                    f"{where}: connector {action.connector!r} uses destination"
                    f" {action.destination!r}, which is not declared for {gw!r}"
                )
    for gw, (where, path) in best_effort_at.items():
        if not any(d.primary for d in dests[gw].values()):
            raise _error(
                where,
                path,
                f"gateway {gw!r} declares a best_effort destination but no primary one",
            )
    gateways = {
        gw: GatewayDecl(
            gw,
            tables.get(gw, {}),
            dests.get(gw, {}),
            {name: action for name, (_, action) in actions.get(gw, {}).items()},
            rules.get(gw),
            connectors.get(gw, {}),
            sources.get(gw, {}),
        )
        for gw in sorted(
            set(tables) | set(dests) | set(actions) | set(rules) | set(connectors) | set(sources)
        )
    }
    return Declarations(gateways)


def load_declarations(folder: Path | None) -> Declarations:
    """Read every YAML file of ``folder`` (a missing folder declares nothing)."""
    if folder is None or not folder.is_dir():
        return Declarations()
    documents: list[tuple[str, Any]] = []
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            documents.append((path.name, yaml.safe_load(path.read_text())))
        except yaml.YAMLError as exc:
            raise DeclarationError(f"{path.name}: invalid YAML: {exc}") from exc
    return parse_declarations(documents)


def apply_declarations(decls: Declarations, store: SchemaStore, now_ms: int = 0) -> int:
    """Register (or additively evolve) every declared table, save declared sync rules and
    (re-)register declared connectors in the config store; return how many tables."""
    count = 0
    for gw, decl in decls.gateways.items():
        for schema in decl.tables.values():
            store.save_schema(gw, schema, now_ms)
            count += 1
        if decl.sync_rules is not None:
            store.save_sync_rules(gw, decl.sync_rules, now_ms)
        for cfg in decl.connectors.values():
            store.save_connector(gw, cfg, now_ms, replace=True)
    return count
