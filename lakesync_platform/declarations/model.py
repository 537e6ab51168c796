"""What the declarations say, once read: one frozen record per declared thing, the kinds each
may be, and ``${VAR}`` expansion (:mod:`.parse` builds them from YAML)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from ..core.actions import ActionDescriptor, ParamSpec, params_struct
from ..core.connectors import ConnectorConfig
from ..core.errors import LakeSyncError
from ..core.schema import TableSchema
from ..core.sync_rules import SyncRules

__all__ = [
    "ACTION_KINDS",
    "BIGQUERY_KEYS",
    "DEFAULT_GATEWAY",
    "DESTINATION_KINDS",
    "DESTINATION_ROLES",
    "ENV_REFERENCE",
    "SOURCE_KINDS",
    "SOURCE_OPTIONS",
    "TIER_KINDS",
    "ActionConnectorDecl",
    "ActionTypeDecl",
    "DeclarationError",
    "Declarations",
    "DestinationDecl",
    "GatewayDecl",
    "LifecycleDecl",
    "SchemaStore",
    "SourceDecl",
    "expand_env",
]

DESTINATION_KINDS: Final = ("postgres", "mysql", "sqlite", "bigquery")
BIGQUERY_KEYS: Final = ("project", "dataset", "location", "endpoint")
ACTION_KINDS: Final = ("webhook", "sql")
DESTINATION_ROLES: Final = ("primary", "best_effort", "cold")
"""``primary``: its failure fails the run; ``best_effort``: retried, its failure is reported;
``cold``: the cold tier of another destination's ``lifecycle`` — materialise never writes it,
only the lifecycle job moves rows into it."""
TIER_KINDS: Final = ("postgres", "mysql", "sqlite")
"""The destination kinds a ``lifecycle`` block may move rows between."""
SOURCE_KINDS: Final = ("postgres", "mysql", "lake", "bigquery")
"""The source kinds a declaration may name (the keys of ``adapters.source.SOURCE_KINDS``)."""
SOURCE_OPTIONS: Final[Mapping[str, tuple[str, ...]]] = {"lake": ("warehouse", "namespace")}
"""The options each source kind requires."""
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DEFAULT_GATEWAY: Final = "default"


class DeclarationError(LakeSyncError):
    """A declaration file is malformed; the message names the file and the problem."""

    code = "DECLARATION_ERROR"


@dataclass(frozen=True, slots=True)
class LifecycleDecl:
    """A destination's lifecycle: rows not written for ``after_s`` seconds move to the cold
    destination ``to`` (``batch`` rows per transaction); a row that changes again comes back."""

    to: str
    after_s: float
    batch: int = 5_000


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
    lifecycle: LifecycleDecl | None = None

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

    return ENV_REFERENCE.sub(sub, text)
