"""The config store on SQL: table schemas (with versions), sync rules and known columns.

Schemas evolve additively only (:func:`~lakesync_platform.core.schema.evolve_schema`); each
saved change bumps the table's version. Known columns are every column a push ever accepted,
per table, in first-seen order (written by the push transaction, :mod:`.append`).
"""

from __future__ import annotations

import msgspec
from sqlalchemy import select

from ..core.schema import TableSchema, evolve_schema, parse_table_schema, table_schema_to_json
from ..core.sync_rules import SyncRules, parse_sync_rules, sync_rules_to_json
from . import tables as t
from .database import SqlDatabase

__all__ = ["SqlConfigStore"]

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


class SqlConfigStore(SqlDatabase):
    """Schemas, sync rules and known columns of every gateway id."""

    def schemas(self, gw: str) -> dict[str, TableSchema]:
        """Registered table schemas of ``gw`` by table name."""
        c = t.schemas.c
        with self.read() as conn:
            result = conn.execute(select(c.tbl, c.schema_json).where(c.gateway_id == gw))
            return {tbl: parse_table_schema(_json_decode(js)) for tbl, js in result}

    def schema_versions(self, gw: str) -> dict[str, int]:
        """Version of each registered schema (1 on first save, +1 per evolution)."""
        c = t.schemas.c
        with self.read() as conn:
            return dict(
                conn.execute(select(c.tbl, c.version).where(c.gateway_id == gw)).tuples().all()
            )

    def save_schema(self, gw: str, schema: TableSchema, now_ms: int = 0) -> TableSchema:
        """Register or evolve (additively) ``schema``; return the stored schema."""
        c = t.schemas.c
        with self.write() as conn:
            row = conn.execute(
                select(c.schema_json, c.version)
                .where(c.gateway_id == gw, c.tbl == schema.table)
                .with_for_update()
            ).first()
            current = None if row is None else parse_table_schema(_json_decode(row[0]))
            evolved = evolve_schema(current, schema)
            if current is not None and evolved == current:
                return current
            body = _json_encode(table_schema_to_json(evolved)).decode()
            version = 1 if row is None else int(row[1]) + 1
            stmt = self._insert(t.schemas).values(
                gateway_id=gw,
                tbl=schema.table,
                version=version,
                schema_json=body,
                updated_ms=now_ms,
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["gateway_id", "tbl"],
                    set_={
                        "version": stmt.excluded.version,
                        "schema_json": stmt.excluded.schema_json,
                        "updated_ms": stmt.excluded.updated_ms,
                    },
                )
            )
        return evolved

    def sync_rules(self, gw: str) -> SyncRules | None:
        """The gateway's sync rules, or ``None`` if none were saved."""
        c = t.sync_rules.c
        with self.read() as conn:
            body = conn.execute(select(c.rules_json).where(c.gateway_id == gw)).scalar()
        return None if body is None else parse_sync_rules(_json_decode(body))

    def save_sync_rules(self, gw: str, rules: SyncRules, now_ms: int = 0) -> None:
        """Replace the gateway's sync rules."""
        body = _json_encode(sync_rules_to_json(rules)).decode()
        stmt = self._insert(t.sync_rules).values(gateway_id=gw, rules_json=body, updated_ms=now_ms)
        with self.write() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["gateway_id"],
                    set_={"rules_json": stmt.excluded.rules_json, "updated_ms": now_ms},
                )
            )

    def table_columns(self, gw: str) -> dict[str, list[str]]:
        """Every column ever accepted, per table, in first-seen order."""
        c = t.table_columns.c
        out: dict[str, list[str]] = {}
        with self.read() as conn:
            for tbl, col in conn.execute(
                select(c.tbl, c.col).where(c.gateway_id == gw).order_by(c.tbl, c.ordinal, c.col)
            ):
                out.setdefault(tbl, []).append(col)
        return out
