"""Table schemas: parsing, evolution and delta checks (PROTOCOL.md §9).

The wire shape is the reference ``TableSchema``::

    {"table": "todos", "columns": [{"name": "title", "type": "string"}],
     "primaryKey": ["row_id"], "softDelete": true, "externalIdColumn": "ext", "sourceTable": "t"}

:func:`parse_table_schema` applies the reference ``validateSchemaBody`` checks (same messages)
plus two of ours: duplicate column names and an invalid ``sourceTable`` are rejected.
:func:`check_delta` enforces a registered schema on push (the reference never does, §9).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from .delta import DELETE, IDENTIFIER_RE, RowDelta
from .errors import SchemaError

__all__ = [
    "CARDINALITIES",
    "COLUMN_TYPES",
    "ColumnSchema",
    "TableSchema",
    "check_delta",
    "evolve_schema",
    "json_type_name",
    "parse_table_schema",
    "table_schema_to_json",
    "with_columns",
]

COLUMN_TYPES: Final = ("string", "number", "boolean", "json", "null")
"""The column types of protocol v1, in the reference's order."""
CARDINALITIES: Final = ("many-to-one", "one-to-many")
"""Allowed ``references.cardinality`` values."""

_IDENT_RULE: Final = (
    "Identifiers must start with a letter or underscore, contain only alphanumeric characters "
    "and underscores, and be at most 64 characters long."
)


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    """One column: ``name``, one of :data:`COLUMN_TYPES`, and an optional foreign reference.

    ``references`` is ``{"table": …, "column": …, "cardinality": …}`` (kept as given).
    """

    name: str
    type: str
    references: Mapping[str, str] | None = field(default=None, hash=False)


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A synced table's declared columns and materialisation options."""

    table: str
    columns: tuple[ColumnSchema, ...]
    primary_key: tuple[str, ...] = ("row_id",)
    soft_delete: bool = True
    external_id_column: str | None = None
    source_table: str | None = None

    @property
    def column_names(self) -> tuple[str, ...]:
        """The column names, in declaration order."""
        return tuple(col.name for col in self.columns)

    def column(self, name: str) -> ColumnSchema | None:
        """The column called ``name``, or ``None``."""
        for col in self.columns:
            if col.name == name:
                return col
        return None


def _js_str(value: Any) -> str:
    """How a JavaScript template literal would show a parsed JSON value in a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "[object Object]"
    if isinstance(value, list):
        return ",".join("" if v is None else _js_str(v) for v in value)
    return str(value)


def _is_identifier(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and IDENTIFIER_RE.fullmatch(value) is not None


def _parse_references(name: str, raw: Any) -> Mapping[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise SchemaError(f'Column "{name}" references must be an object of strings')
    if not _is_identifier(raw.get("table")) or not _is_identifier(raw.get("column")):
        raise SchemaError(f'Column "{name}" references must name a valid table and column')
    cardinality = raw.get("cardinality")
    if cardinality is not None and cardinality not in CARDINALITIES:
        raise SchemaError(
            f'Column "{name}" references cardinality must be one of: {", ".join(CARDINALITIES)}'
        )
    return dict(raw)


def _parse_columns(raw_columns: list[Any]) -> tuple[ColumnSchema, ...]:
    columns: list[ColumnSchema] = []
    seen: set[str] = set()
    for raw in raw_columns:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str) or not raw["name"]:
            raise SchemaError("Each column must have a non-empty 'name' string")
        name = raw["name"]
        if not _is_identifier(name):
            raise SchemaError(f'Invalid column name: "{name}". {_IDENT_RULE}')
        col_type = raw.get("type")
        if not isinstance(col_type, str) or col_type not in COLUMN_TYPES:
            shown = _js_str(col_type) if "type" in raw else "undefined"
            raise SchemaError(
                f'Invalid column type "{shown}" for column "{name}". '
                f"Allowed: {', '.join(COLUMN_TYPES)}"
            )
        if name in seen:
            raise SchemaError(f'Duplicate column name: "{name}"')
        seen.add(name)
        columns.append(ColumnSchema(name, col_type, _parse_references(name, raw.get("references"))))
    return tuple(columns)


def parse_table_schema(obj: object) -> TableSchema:
    """Validate a wire ``TableSchema`` (parsed JSON) and build a :class:`TableSchema`.

    Raises :class:`SchemaError` with the reference ``validateSchemaBody`` messages.
    """
    if not isinstance(obj, Mapping):
        raise SchemaError("Missing required fields: table, columns")
    table = obj.get("table")
    raw_columns = obj.get("columns")
    if table in (None, "", 0, False) or not isinstance(raw_columns, list):
        raise SchemaError("Missing required fields: table, columns")
    if not _is_identifier(table):
        raise SchemaError(f'Invalid table name: "{_js_str(table)}". {_IDENT_RULE}')
    columns = _parse_columns(raw_columns)
    names = {col.name for col in columns}

    primary_key: tuple[str, ...] = ("row_id",)
    if "primaryKey" in obj:
        raw_pk = obj["primaryKey"]
        if (
            not isinstance(raw_pk, list)
            or not raw_pk
            or not all(isinstance(p, str) for p in raw_pk)
        ):
            raise SchemaError("primaryKey must be a non-empty array of strings")
        for pk in raw_pk:
            if pk != "row_id" and pk not in names:
                raise SchemaError(f'primaryKey column "{pk}" must be "row_id" or exist in columns')
        primary_key = tuple(raw_pk)

    soft_delete = obj.get("softDelete", True)
    if not isinstance(soft_delete, bool):
        raise SchemaError("softDelete must be a boolean")

    external_id = obj.get("externalIdColumn")
    if "externalIdColumn" in obj:
        if not isinstance(external_id, str) or not external_id:
            raise SchemaError("externalIdColumn must be a non-empty string")
        if external_id not in names:
            raise SchemaError(f'externalIdColumn "{external_id}" must exist in columns')

    source_table = obj.get("sourceTable")
    if source_table is not None and not _is_identifier(source_table):
        raise SchemaError(f'Invalid source table name: "{_js_str(source_table)}". {_IDENT_RULE}')

    return TableSchema(
        table=table,
        columns=columns,
        primary_key=primary_key,
        soft_delete=soft_delete,
        external_id_column=external_id,
        source_table=source_table,
    )


def table_schema_to_json(schema: TableSchema) -> dict[str, Any]:
    """The wire (camelCase) form of ``schema``; :func:`parse_table_schema` reads it back."""
    columns: list[dict[str, Any]] = []
    for col in schema.columns:
        entry: dict[str, Any] = {"name": col.name, "type": col.type}
        if col.references is not None:
            entry["references"] = dict(col.references)
        columns.append(entry)
    out: dict[str, Any] = {"table": schema.table}
    if schema.source_table is not None:
        out["sourceTable"] = schema.source_table
    out["columns"] = columns
    out["primaryKey"] = list(schema.primary_key)
    out["softDelete"] = schema.soft_delete
    if schema.external_id_column is not None:
        out["externalIdColumn"] = schema.external_id_column
    return out


def evolve_schema(current: TableSchema | None, new: TableSchema) -> TableSchema:
    """The schema after registering ``new`` over ``current`` (additive evolution only).

    Adding columns is allowed; removing one or changing its type raises :class:`SchemaError`
    (reference ``SchemaManager.evolveSchema`` messages). An unchanged schema returns ``current``.
    """
    if current is None:
        return new
    if new.table != current.table:
        raise SchemaError(
            f'Cannot evolve schema: table name mismatch ("{current.table}" vs "{new.table}")'
        )
    new_types = {col.name: col.type for col in new.columns}
    for col in current.columns:
        if col.name not in new_types:
            raise SchemaError(
                f'Cannot remove column "{col.name}" — only adding nullable columns is supported'
            )
    for col in current.columns:
        if new_types[col.name] != col.type:
            raise SchemaError(
                f'Cannot change type of column "{col.name}" from "{col.type}" '
                f'to "{new_types[col.name]}"'
            )
    return current if new == current else new


def with_columns(current: TableSchema | None, wanted: TableSchema) -> TableSchema | None:
    """``current`` widened by the columns of ``wanted`` it lacks (appended, in ``wanted``'s
    order; a column it has keeps its type), ``wanted`` when there is no ``current``, or
    ``None`` when nothing is missing: what a source that learned new fields registers."""
    if current is None:
        return wanted
    missing = tuple(c for c in wanted.columns if current.column(c.name) is None)
    if not missing:
        return None
    return dataclasses.replace(current, columns=current.columns + missing)


def json_type_name(value: Any) -> str:
    """The JSON type name of a value: string, number, boolean, null, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _is_json(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if depth > 512:
        return False
    if isinstance(value, list | tuple):
        return all(_is_json(v, depth + 1) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _is_json(v, depth + 1) for k, v in value.items())
    return False


def _matches(col_type: str, value: Any) -> bool:
    if value is None:
        return True
    if col_type == "string":
        return isinstance(value, str)
    if col_type == "number":
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and (not isinstance(value, float) or math.isfinite(value))
        )
    if col_type == "boolean":
        return isinstance(value, bool)
    if col_type == "json":
        return _is_json(value)
    return False  # "null": only None, handled above


def check_delta(schema: TableSchema, delta: RowDelta, *, version: int = 1) -> None:
    """Raise :class:`SchemaError` unless every column of ``delta`` fits ``schema``.

    A ``DELETE`` always passes (its columns are ignored by the merge). Every column must be
    declared (reference message, naming the schema ``version``) and its value must have the
    declared type; ``None`` (null) fits every type. Like the reference, ``delta.table`` is not
    compared with ``schema.table``: the caller picks the schema.
    """
    if delta.op == DELETE:
        return
    declared_types = {c.name: c.type for c in schema.columns}
    for col in delta.columns:
        declared = declared_types.get(col.column)
        if declared is None:
            raise SchemaError(
                f'Unknown column "{col.column}" in delta for table "{delta.table}". '
                f"Schema version {version} does not include this column."
            )
        if not _matches(declared, col.value):
            got = json_type_name(col.value)
            if isinstance(col.value, float) and not math.isfinite(col.value):
                got = "non-finite number"
            raise SchemaError(
                f'Column "{col.column}" in delta for table "{delta.table}" expects type '
                f'"{declared}", got {got}'
            )
