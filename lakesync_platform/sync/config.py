"""A gateway's sync configuration as the engine uses it: schemas, rules and known columns."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from ..core.schema import TableSchema
from ..core.sync_rules import Claims, SyncRules, sync_rules_to_json
from ..core.wal import WalStore
from .cursors import view_tag

__all__ = ["GatewayConfig", "load_config"]


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
    column_sets: dict[str, set[str]] = field(init=False)
    _types: dict[str, dict[str, str]] = field(init=False)
    _delivered: dict[tuple[str, int], tuple[tuple[str, ...], frozenset[str]]] = field(init=False)

    def __post_init__(self) -> None:
        self.has_filters = self.rules is not None and any(b.filters for b in self.rules.buckets)
        self.column_sets = {tbl: set(cols) for tbl, cols in self.columns.items()}
        self._types = {}
        self._delivered = {}

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

    def view_tag(self, claims: Claims) -> int:
        """0 without filtering rules; else the :func:`~.cursors.view_tag` of rules and claims."""
        if not self.has_filters:
            return 0
        return view_tag(self.rules_key, claims)


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
