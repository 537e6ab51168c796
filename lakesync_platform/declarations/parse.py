"""Reading the declarations: YAML documents into msgspec structs, checked with errors that name
the file and the path, into the records of :mod:`.model`; and applying them to a config store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from ..core.actions import PARAM_TYPES, ParamSpec
from ..core.connectors import ConnectorConfig, parse_connector_config
from ..core.delta import check_identifier
from ..core.errors import SchemaError, ValidationError
from ..core.identifiers import check_gateway_id
from ..core.schema import TableSchema, parse_table_schema
from ..core.sync_rules import SyncRules, parse_sync_rules
from .model import (
    ACTION_KINDS,
    BIGQUERY_KEYS,
    DEFAULT_GATEWAY,
    DESTINATION_KINDS,
    DESTINATION_ROLES,
    ENV_REFERENCE,
    SOURCE_KINDS,
    SOURCE_OPTIONS,
    TIER_KINDS,
    ActionConnectorDecl,
    ActionTypeDecl,
    DeclarationError,
    Declarations,
    DestinationDecl,
    GatewayDecl,
    LifecycleDecl,
    SchemaStore,
    SourceDecl,
)

__all__ = ["apply_declarations", "load_declarations", "parse_declarations"]


class _Lifecycle(msgspec.Struct, forbid_unknown_fields=True):
    """A destination's lifecycle block as written (``after``: an ISO 8601 duration)."""

    to: str
    after: timedelta
    batch: Annotated[int, msgspec.Meta(ge=1)] = 5_000


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
    lifecycle: _Lifecycle | None = None


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
        for key in BIGQUERY_KEYS:
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
        lifecycle=_lifecycle(where, path, name, raw),
    )


def _lifecycle(where: str, path: str, name: str, raw: _Destination) -> LifecycleDecl | None:
    """A destination's lifecycle block, checked on its own (its target: :func:`_check_tiers`)."""
    block = raw.lifecycle
    if block is None:
        return None
    at = f"{path}.lifecycle"
    if raw.role == "cold":
        raise _error(where, at, f"destination {name!r} is a cold tier: it has no lifecycle")
    if raw.kind not in TIER_KINDS:
        raise _error(
            where, at, f"lifecycle moves rows between {TIER_KINDS} destinations, not {raw.kind}"
        )
    if block.after.total_seconds() <= 0:
        raise _error(where, f"{at}.after", "lifecycle after must be a positive duration")
    return LifecycleDecl(block.to, block.after.total_seconds(), block.batch)


def _check_tiers(where: dict[str, str], dests: dict[str, DestinationDecl], gw: str) -> None:
    """Each lifecycle names a cold destination of the gateway that covers its tables, and each
    cold destination is some lifecycle's target."""
    targets: dict[str, str] = {}
    for dest in dests.values():
        tier = dest.lifecycle
        if tier is None:
            continue
        at = f"{where[dest.name]}: destination {dest.name!r} lifecycle"
        cold = dests.get(tier.to)
        if cold is None:
            known = ", ".join(n for n, d in dests.items() if d.role == "cold") or "none"
            raise DeclarationError(
                f"{at} moves rows to {tier.to!r}, which is not declared for {gw!r} "
                f"(cold destinations: {known})"
            )
        if cold.role != "cold":
            raise DeclarationError(f"{at} moves rows to {tier.to!r}, whose role is not cold")
        if cold.kind not in TIER_KINDS:
            raise DeclarationError(
                f"{at} moves rows to {tier.to!r} of kind {cold.kind}: a cold tier is one of "
                f"{TIER_KINDS}"
            )
        if cold.tables is not None and (
            dest.tables is None or not set(dest.tables) <= set(cold.tables)
        ):
            raise DeclarationError(
                f"{at}: the cold destination {tier.to!r} must cover every table of "
                f'{dest.name!r} (give it tables: "*" or the same list)'
            )
        if tier.to in targets:
            raise DeclarationError(
                f"{at}: {tier.to!r} is already the cold tier of {targets[tier.to]!r}"
            )
        targets[tier.to] = dest.name
    for dest in dests.values():
        if dest.role == "cold" and dest.name not in targets:
            raise DeclarationError(
                f"{where[dest.name]}: destination {dest.name!r} has role cold but no "
                "destination's lifecycle moves rows to it"
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
    if raw.dataset is not None and not ENV_REFERENCE.search(raw.dataset):
        try:
            check_identifier(raw.dataset, "dataset")
        except SchemaError as exc:
            raise _error(where, f"{path}.dataset", exc.message) from exc
    endpoint = raw.endpoint
    if (
        endpoint is not None
        and not ENV_REFERENCE.search(endpoint)
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
    dest_files: dict[str, dict[str, str]] = {}  # gw → destination → the file declaring it
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
            dest_files.setdefault(gw, {})[dest.name] = where
            if dest.role == "best_effort":
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
    for gw, declared_dests in dests.items():
        _check_tiers(dest_files[gw], declared_dests, gw)
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
