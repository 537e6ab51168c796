"""Salesforce describe → columns, records → rows, SOQL and quota headers: pure functions.

Columns are the snake case of the field names (``BillingCity`` → ``billing_city``,
``Owner.Name`` → ``owner_name``, a custom ``Tier__c`` → ``tier__c``), ``Id`` is ``sf_id``
(the reference's names); types come from ``describe`` (numbers, booleans, text for the rest).
A record with ``IsDeleted`` true becomes a delete. REST records carry relationship fields as
nested objects and times as ``2026-01-15T10:30:00.000+0000``; Bulk API 2.0 CSV rows carry
``Owner.Name`` columns, text values (empty for null) and ``…Z`` times: both map to the same row.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.schema import ColumnSchema, TableSchema
from ..model import Change
from .settings import (
    BOOLEAN_TYPES,
    CURSOR_FIELD,
    DELETED_FIELD,
    ID_FIELD,
    NUMBER_TYPES,
    RELATIONSHIP_NAMES,
    SKIPPED_TYPES,
)

__all__ = [
    "SfField",
    "count_soql",
    "csv_change",
    "describe_fields",
    "ids_soql",
    "next_cursor",
    "object_schema",
    "parse_limit_info",
    "parse_sf_time",
    "poll_soql",
    "record_change",
    "snake",
]

_SUFFIX = re.compile(r"(__[a-zA-Z]+)$")


@dataclass(frozen=True, slots=True)
class SfField:
    """A polled field: its API name (``Owner.Name`` for a relationship), its column, the
    column's type, and the field's Salesforce type."""

    api_name: str
    column: str
    type: str
    sf_type: str = "string"


def snake(name: str) -> str:
    """The column name of a field (``NumberOfEmployees`` → ``number_of_employees``,
    ``SLAExpirationDate__c`` → ``sla_expiration_date__c``, ``Id`` → ``sf_id``)."""
    if name == ID_FIELD:
        return "sf_id"
    suffix = ""
    found = _SUFFIX.search(name)
    if found:
        suffix, name = found.group(1).lower(), name[: found.start()]
    name = name.replace(".", "_")
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return (re.sub(r"_+", "_", name).lower() + suffix)[:64]


def _column_type(sf_type: str) -> str:
    if sf_type in NUMBER_TYPES:
        return "number"
    if sf_type in BOOLEAN_TYPES:
        return "boolean"
    return "string"


def describe_fields(describe: Mapping[str, Any]) -> list[SfField]:
    """The polled fields of an sObject's ``describe``: every field but compound ones and file
    bodies, ``IsDeleted`` (it makes the row a delete) excepted, plus the related names of
    :data:`~.settings.RELATIONSHIP_NAMES`."""
    out: list[SfField] = []
    for f in describe.get("fields") or ():
        name, kind = f.get("name"), str(f.get("type") or "string")
        if not isinstance(name, str) or kind in SKIPPED_TYPES or name == DELETED_FIELD:
            continue
        out.append(SfField(name, snake(name), _column_type(kind), kind))
        related = RELATIONSHIP_NAMES.get(name)
        if related is not None:
            out.append(SfField(related, snake(related), "string"))
    return out


def object_schema(table: str, fields: Sequence[SfField]) -> TableSchema:
    """The gateway table of an sObject."""
    return TableSchema(table, tuple(ColumnSchema(f.column, f.type) for f in fields))


def _select(fields: Sequence[SfField]) -> str:
    names = [f.api_name for f in fields]
    return ", ".join([*names, DELETED_FIELD] if DELETED_FIELD not in names else names)


def sf_literal(at: dt.datetime) -> str:
    """A SOQL datetime literal (UTC, milliseconds, unquoted)."""
    utc = at.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def poll_soql(
    sobject: str,
    fields: Sequence[SfField],
    state: Mapping[str, Any],
    lookback_ms: int,
    soql_filter: str | None,
    *,
    ordered: bool = True,
) -> str:
    """The SOQL of a poll: records whose ``SystemModstamp`` is at or after the cursor minus
    the lookback (all of them on the first poll), in ``SystemModstamp`` order."""
    where: list[str] = []
    since = state.get(CURSOR_FIELD)
    if isinstance(since, str):
        at = dt.datetime.fromisoformat(since) - dt.timedelta(milliseconds=lookback_ms)
        where.append(f"{CURSOR_FIELD} >= {sf_literal(at)}")
    if soql_filter:
        where.append(f"({soql_filter})")
    soql = f"SELECT {_select(fields)} FROM {sobject}"
    if where:
        soql += " WHERE " + " AND ".join(where)
    return soql + (f" ORDER BY {CURSOR_FIELD} ASC, {ID_FIELD} ASC" if ordered else "")


def count_soql(sobject: str, soql_filter: str | None) -> str:
    """How many records a first load would read."""
    return f"SELECT COUNT() FROM {sobject}" + (f" WHERE ({soql_filter})" if soql_filter else "")


def ids_soql(sobject: str, soql_filter: str | None) -> str:
    """The census's id-only query (``query``: records in the recycle bin are not present)."""
    return f"SELECT {ID_FIELD} FROM {sobject}" + (f" WHERE ({soql_filter})" if soql_filter else "")


def _related(record: Mapping[str, Any], api_name: str) -> Any:
    rel, _, name = api_name.partition(".")
    parent = record.get(rel)
    return parent.get(name) if isinstance(parent, Mapping) else None


def record_change(record: Mapping[str, Any], fields: Sequence[SfField]) -> Change:
    """A REST record as a row (``None`` for a deleted one)."""
    row_id = str(record[ID_FIELD])
    if record.get(DELETED_FIELD) is True:
        return Change(row_id, None)
    get = record.get
    row = {
        f.column: _related(record, f.api_name) if "." in f.api_name else get(f.api_name)
        for f in fields
        if f.api_name != ID_FIELD
    }
    row["sf_id"] = row_id
    return Change(row_id, row)


def _typed(text: str, kind: str) -> Any:
    if text == "":
        return None
    if kind == "boolean":
        return text.lower() == "true"
    if kind == "number":
        number = float(text)
        return int(number) if number.is_integer() and "." not in text else number
    return text


def csv_change(row: Mapping[str, str], fields: Sequence[SfField]) -> Change:
    """A Bulk API 2.0 CSV row as a row (text values typed by the describe; ``None`` for a
    deleted record)."""
    row_id = row[ID_FIELD]
    if row.get(DELETED_FIELD, "").lower() == "true":
        return Change(row_id, None)
    out: dict[str, Any] = {}
    for f in fields:
        if f.api_name == ID_FIELD:
            continue
        value = _typed(row.get(f.api_name, ""), f.type)
        if isinstance(value, str) and f.sf_type == "datetime":
            value = _rest_time(value)
        out[f.column] = value
    out["sf_id"] = row_id
    return Change(row_id, out)


def _rest_time(value: str) -> str:
    """A Bulk ``…Z`` time written as REST writes it (``…+0000``), so both paths agree."""
    return value[:-1] + "+0000" if value.endswith("Z") else value


def parse_sf_time(value: str) -> dt.datetime:
    """A Salesforce time (``…000+0000`` or ``…000Z``), timezone-aware."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("+0000", "+00:00"))


def next_cursor(state: Mapping[str, Any], stamps: Sequence[Any]) -> dict[str, Any]:
    """The state after records with these ``SystemModstamp`` values: the latest, UTC."""
    latest = state.get(CURSOR_FIELD)
    for raw in stamps:
        if isinstance(raw, str) and raw:
            at = parse_sf_time(raw).astimezone(dt.UTC).isoformat(timespec="milliseconds")
            latest = at if latest is None or at > latest else latest
    return dict(state) if latest is None else {**state, CURSOR_FIELD: latest}


def parse_limit_info(header: str | None) -> tuple[int, int] | None:
    """``(used, limit)`` from ``Sforce-Limit-Info: api-usage=25/15000``."""
    if not header:
        return None
    found = re.search(r"api-usage=(\d+)/(\d+)", header)
    return None if found is None else (int(found.group(1)), int(found.group(2)))
