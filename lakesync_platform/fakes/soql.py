"""The SOQL the Salesforce fake understands: what a connector sends, nothing more.

``SELECT f, Rel.Name, … FROM Obj [WHERE a op literal [AND (…)]] [ORDER BY f ASC, …] [LIMIT n]``
and ``SELECT COUNT() FROM …``; literals are strings, numbers, booleans, ``null`` and datetimes
(compared as epoch milliseconds). Anything else raises :class:`ValueError` (Salesforce's
``MALFORMED_QUERY``).
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Soql", "parse_soql"]


@dataclass(frozen=True, slots=True)
class Soql:
    fields: list[str]
    sobject: str
    where: list[Callable[[Mapping[str, Any]], bool]]
    order: list[str]
    limit: int | None


_SELECT = re.compile(
    r"SELECT\s+(?P<fields>.+?)\s+FROM\s+(?P<obj>\w+)"
    r"(?:\s+WHERE\s+(?P<where>.+?))?(?:\s+ORDER\s+BY\s+(?P<order>.+?))?"
    r"(?:\s+LIMIT\s+(?P<limit>\d+))?\s*",
    re.IGNORECASE | re.DOTALL,
)
_CONDITION = re.compile(r"(?P<field>\w+)\s*(?P<op>>=|<=|!=|=|>|<)\s*(?P<value>.+)")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?(?:Z|[+-]\d{2}:?\d{2})")


def _literal(text: str) -> Any:
    text = text.strip()
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1].replace("\\'", "'")
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() == "null":
        return None
    if _DATETIME.fullmatch(text):
        return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        raise ValueError(f"unexpected token: '{text}'") from None


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _condition(
    name: str, op: Callable[[Any, Any], Any], value: Any
) -> Callable[[Mapping[str, Any]], bool]:
    def check(record: Mapping[str, Any]) -> bool:
        found = record.get(name)
        if found is None or value is None:
            return bool(op(found, value)) if op in (operator.eq, operator.ne) else False
        return bool(op(found, value))

    return check


def parse_soql(soql: str) -> Soql:
    """The parts of the SOQL a connector sends (raises ValueError for anything else)."""
    m = _SELECT.fullmatch(soql.strip())
    if m is None:
        raise ValueError(f"unexpected token in SOQL: {soql[:80]!r}")
    fields = [f.strip() for f in m.group("fields").split(",")]
    where: list[Callable[[Mapping[str, Any]], bool]] = []
    for clause in re.split(r"\s+AND\s+", m.group("where") or "", flags=re.IGNORECASE):
        clause = clause.strip().strip("()").strip()
        if not clause:
            continue
        c = _CONDITION.fullmatch(clause)
        if c is None:
            raise ValueError(f"unexpected token: '{clause}'")
        where.append(_condition(c.group("field"), _OPS[c.group("op")], _literal(c.group("value"))))
    order = [o.strip().split()[0] for o in (m.group("order") or "").split(",") if o.strip()]
    limit = int(m.group("limit")) if m.group("limit") else None
    return Soql(fields, m.group("obj"), where, order, limit)
