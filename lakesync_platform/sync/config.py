"""A gateway's sync configuration as the engine uses it: schemas, rules and known columns."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from ..core.schema import TableSchema
from ..core.sync_rules import Claims, ClientView, SyncRules, sync_rules_to_json
from ..core.wal import WalStore
from .cursors import view_tag

__all__ = ["GatewayConfig", "ViewKey", "load_config"]

ViewKey = tuple[tuple[str, str | tuple[str, ...] | None], ...] | None
"""What of a client's claims decides its view (:meth:`GatewayConfig.view_key`)."""


@dataclass
class GatewayConfig:
    """A gateway's schemas, rules and known columns, as loaded at ``loaded`` (monotonic s)."""

    schemas: dict[str, TableSchema]
    versions: dict[str, int]
    rules: SyncRules | None
    rules_key: bytes
    columns: dict[str, list[str]]
    loaded: float
    has_filters: bool = field(init=False)
    checks_writes: bool = field(init=False)
    """Whether pushes are judged by the rules' buckets (there are buckets, and the rules do not
    say ``"writes": "unrestricted"``)."""
    column_sets: dict[str, set[str]] = field(init=False)
    _types: dict[str, dict[str, str]] = field(init=False)
    _delivered: dict[tuple[str, int], tuple[tuple[str, ...], frozenset[str]]] = field(init=False)
    claim_names: tuple[str, ...] = field(init=False)
    """The claims the rules read (filter values ``jwt:NAME``), sorted."""
    _views: dict[ViewKey, ClientView] = field(init=False)
    _tags: dict[ViewKey, int] = field(init=False)

    def __post_init__(self) -> None:
        self.has_filters = self.rules is not None and any(b.filters for b in self.rules.buckets)
        self.checks_writes = (
            self.rules is not None
            and bool(self.rules.buckets)
            and not self.rules.unrestricted_writes
        )
        self.column_sets = {tbl: set(cols) for tbl, cols in self.columns.items()}
        self._types = {}
        self._delivered = {}
        buckets = self.rules.buckets if self.rules is not None else ()
        self.claim_names = tuple(
            sorted({f.value[4:] for b in buckets for f in b.filters if f.value.startswith("jwt:")})
        )
        self._views = {}
        self._tags = {}

    def add_column(self, table: str, name: str) -> None:
        """Record a column first accepted by a push (``columns`` keeps first-seen order)."""
        if name not in self.column_sets.setdefault(table, set()):
            self.column_sets[table].add(name)
            self.columns.setdefault(table, []).append(name)

    def column_types(self, table: str) -> dict[str, str]:
        """Declared type by column name for a table with a registered schema."""
        types = self._types.get(table)
        if types is None:
            types = self._types[table] = {c.name: c.type for c in self.schemas[table].columns}
        return types

    def delivered_columns(self, table: str) -> tuple[tuple[str, ...], frozenset[str]]:
        """:meth:`full_columns` as a tuple and a set, cached until the config reloads."""
        key = (table, len(self.columns.get(table, ())))
        cached = self._delivered.get(key)
        if cached is None:
            names = tuple(self.full_columns(table))
            cached = self._delivered[key] = (names, frozenset(names))
        return cached

    def full_columns(self, table: str) -> list[str]:
        """Every column a delivered row of ``table`` carries (``null`` where the row has none)."""
        schema = self.schemas.get(table)
        if schema is not None:
            return list(schema.column_names)
        return self.columns.get(table, [])

    def view_tag(self, claims: Claims, key: ViewKey = None) -> int:
        """0 without filtering rules; else the :func:`~.cursors.view_tag` of the rules and the
        claims they read (``key``: their :meth:`view_key`, if known). A claim the rules do not
        read changes no view, so it changes no tag: clients of one view share their cursors'
        tag (and the broadcast feed their pages)."""
        if not self.has_filters:
            return 0
        if key is None:
            key = self.view_key(claims)
        tag = self._tags.get(key)
        if tag is None:
            read = {n: v for n, v in key or () if v is not None}
            tag = self._tags[key] = view_tag(self.rules_key, read)
        return tag

    def view_key(self, claims: Claims) -> ViewKey:
        """What of ``claims`` decides the client's view: the values of the claims the rules
        read (``None`` without filtering rules: one view for every client). Clients with
        equal keys see the same rows."""
        if not self.has_filters:
            return None
        return tuple(
            (n, v if v is None or isinstance(v, str) else tuple(v))
            for n in self.claim_names
            for v in (claims.get(n),)
        )

    def client_view(self, claims: Claims, key: ViewKey) -> ClientView:
        """The view of a client with ``claims`` (``key``: their :meth:`view_key`), compiled
        once per key while this config is current."""
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = ClientView(self.rules, claims)
        return view


def load_config(store: WalStore, gw: str, loaded: float) -> GatewayConfig:
    """Read ``gw``'s configuration from the config store."""
    rules = store.sync_rules(gw)
    return GatewayConfig(
        schemas=store.schemas(gw),
        versions=store.schema_versions(gw),
        rules=rules,
        rules_key=b"" if rules is None else msgspec.json.encode(sync_rules_to_json(rules)),
        columns=store.table_columns(gw),
        loaded=loaded,
    )
