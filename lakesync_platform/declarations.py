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
        kind: postgres            # postgres | mysql | sqlite
        url: postgresql+psycopg://app@db:5432/analytics   # ${VAR} is read from the environment
        tables: [todos]           # optional; default: every table of the gateway ("*")
        role: primary             # optional: primary (default; its failure fails the run) or
                                  # best_effort (retried; a failure is reported, the run goes on)
    sources:                      # stores clients pull from: GET …/pull?source=<name>
      - name: crm                 # identifier, unique per gateway
        kind: postgres            # postgres | mysql (a database holding lakesync_deltas) | lake
        url: postgresql+psycopg://app@db:5432/crm         # ${VAR} is read from the environment
        options: {}               # the kind's own settings (strings; ${VAR} too): lake needs
                                  # warehouse and namespace, its url is the Iceberg catalog's

Several files may declare the same gateway; their tables and destinations add up (a table or
destination declared twice is an error). Routing: each destination receives the tables it
lists; a table listed by several destinations fans out to all of them. A gateway with a
``best_effort`` destination must declare a ``primary`` one: a best-effort destination's lag is
measured against the primary destinations covering the same table. A file is read into
msgspec structs, so a misspelt key or a value of the wrong type is refused with the file and
the path of the value (``x.yaml: Object contains unknown field `tabels` - at `$```); the
gateway id follows the platform's rule
(:func:`~lakesync_platform.core.identifiers.check_gateway_id`). Top-level ``syncRules`` and
``connectors`` are reserved for the sync-rule and connector declarations of later releases and
rejected for now.

Declared tables are applied to the gateway's config store (:func:`apply_declarations`), which
stays the runtime source of truth: a table registered only through ``POST /v1/admin/schema``
flows through the pipeline like a declared one, and reaches every destination whose ``tables``
is ``"*"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Protocol

import msgspec
import yaml

from .core.delta import check_identifier
from .core.errors import LakeSyncError, SchemaError, ValidationError
from .core.identifiers import check_gateway_id
from .core.schema import TableSchema, parse_table_schema

__all__ = [
    "DESTINATION_KINDS",
    "DESTINATION_ROLES",
    "SOURCE_KINDS",
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

DESTINATION_KINDS: Final = ("postgres", "mysql", "sqlite")
DESTINATION_ROLES: Final = ("primary", "best_effort")
"""``primary``: its failure fails the run; ``best_effort``: retried, its failure is reported."""
SOURCE_KINDS: Final = ("postgres", "mysql", "lake")
"""The source kinds a declaration may name (the keys of ``adapters.source.SOURCE_KINDS``)."""
SOURCE_OPTIONS: Final[Mapping[str, tuple[str, ...]]] = {"lake": ("warehouse", "namespace")}
"""The options each source kind requires."""
_RESERVED: Final = frozenset(("syncRules", "connectors"))
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DEFAULT_GATEWAY: Final = "default"


class DeclarationError(LakeSyncError):
    """A declaration file is malformed; the message names the file and the problem."""

    code = "DECLARATION_ERROR"


@dataclass(frozen=True, slots=True)
class DestinationDecl:
    """A SQL destination: ``url`` may hold ``${VAR}`` references (expanded at run time)."""

    name: str
    kind: str
    url: str
    tables: tuple[str, ...] | None = None
    role: str = "primary"

    @property
    def primary(self) -> bool:
        """Whether a failure to write this destination fails the run."""
        return self.role == "primary"

    def covers(self, table: str) -> bool:
        """Whether this destination receives ``table`` (``tables`` unset = every table)."""
        return self.tables is None or table in self.tables


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
    url: Annotated[str, msgspec.Meta(min_length=1)]
    tables: list[str] | Literal["*"] | None = "*"
    role: str = "primary"


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
    sources: list[_Source] | None = None


def _error(where: str, path: str, message: str) -> DeclarationError:
    """The error for ``message`` about ``path`` of file ``where``, in msgspec's format."""
    return DeclarationError(f"{where}: {message} - at `{path}`")


def _read_document(where: str, doc: object) -> _Document:
    if isinstance(doc, Mapping):
        reserved = _RESERVED & set(doc)
        if reserved:
            raise DeclarationError(f"{where}: {sorted(reserved)} are not supported yet")
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
    if raw.role not in DESTINATION_ROLES:
        raise _error(
            where, f"{path}.role", f"destination {name!r} role must be one of {DESTINATION_ROLES}"
        )
    if raw.tables is None or raw.tables == "*":
        return DestinationDecl(name, raw.kind, raw.url, None, raw.role)
    tables = []
    for j, table in enumerate(raw.tables):
        try:
            tables.append(check_identifier(table, "table"))
        except SchemaError as exc:
            raise _error(where, f"{path}.tables[{j}]", exc.message) from exc
    return DestinationDecl(name, raw.kind, raw.url, tuple(tables), raw.role)


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
        for i, raw_source in enumerate(parsed.sources or []):
            source = _source(where, i, raw_source)
            if source.name in sources.setdefault(gw, {}):
                raise _error(
                    where, f"$.sources[{i}].name", f"source {source.name!r} declared twice"
                )
            sources[gw][source.name] = source
    for gw, (where, path) in best_effort_at.items():
        if not any(d.primary for d in dests[gw].values()):
            raise _error(
                where,
                path,
                f"gateway {gw!r} declares a best_effort destination but no primary one",
            )
    gateways = {
        gw: GatewayDecl(gw, tables.get(gw, {}), dests.get(gw, {}), sources.get(gw, {}))
        for gw in sorted(set(tables) | set(dests) | set(sources))
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
    """Register (or additively evolve) every declared table in the config store; return count."""
    count = 0
    for gw, decl in decls.gateways.items():
        for schema in decl.tables.values():
            store.save_schema(gw, schema, now_ms)
            count += 1
    return count
