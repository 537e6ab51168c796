"""Sync rules: which rows each client may see (PROTOCOL.md §5).

A rule set is a union of *buckets*; a bucket names tables (none = every table) and a conjunction
of *filters* ``column op value``. A value ``jwt:<claim>`` is replaced by the client's claim (a
string or a list of strings); a missing claim makes the filter fail.

Unlike the reference, which tests each *delta* (so a DELETE never passes a filtered bucket), the
platform evaluates rules on **row state** (:meth:`ClientView.row_visible`): the caller decides
from the row before and after a change whether it enters, stays in or leaves the view
(ARCHITECTURE.md §4). Per filter the reference semantics are kept exactly: a column missing from
the row fails the filter; the row value is converted with JavaScript ``String()``; ``eq``/``in``
and ``neq`` are exact string (non-)membership; ``gt``/``lt``/``gte``/``lte`` compare the first
resolved value numerically when ``parseFloat`` reads a number from both sides, else by
:func:`locale_compare` (an approximation of ICU ``localeCompare``, see there).

The same buckets govern **writes** (:meth:`ClientView.may_write`), as Postgres row-level
security's ``USING`` and ``WITH CHECK`` do: a change is allowed only if the row before it (an
update or a delete) and the row after it (an insert or an update) are each in a bucket that
allows that operation. A bucket allows every operation unless it says ``"write": false``
(read-only) or lists the operations it allows (``"write": ["insert", "update"]``). The rule
set's ``"writes": "unrestricted"`` turns the check off (the reference's behaviour: any client
writes any row).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from .delta import IDENTIFIER_RE
from .errors import ValidationError
from .ids import js_number

__all__ = [
    "FILTER_OPS",
    "UNRESTRICTED_WRITES",
    "WRITE_OPS",
    "Bucket",
    "Claims",
    "ClientView",
    "Filter",
    "SyncRules",
    "js_parse_float",
    "js_string",
    "locale_compare",
    "parse_sync_rules",
    "sync_rules_to_json",
]

FILTER_OPS: Final = ("eq", "in", "neq", "gt", "lt", "gte", "lte")
"""Filter operators, in the reference's order (used in its validation message)."""

WRITE_OPS: Final = ("insert", "update", "delete")
"""The operations a bucket may allow (``"write"``), judged on the row: an *insert* makes a row
live, an *update* changes a live row, a *delete* ends one."""

UNRESTRICTED_WRITES: Final = "unrestricted"
"""The rule set's ``"writes"`` value that turns write checks off."""

Claims: TypeAlias = Mapping[str, str | Sequence[str]]
"""A client's resolved JWT claims (``TokenClaims.claims``)."""


@dataclass(frozen=True, slots=True)
class Filter:
    """``column op value``; ``value`` is a literal string or ``jwt:<claim>``."""

    column: str
    op: str
    value: str


@dataclass(frozen=True, slots=True)
class Bucket:
    """A named set of rows: rows of ``tables`` (empty = all tables) matching every filter;
    ``write``: the operations (:data:`WRITE_OPS`) its rows may undergo."""

    name: str
    tables: tuple[str, ...]
    filters: tuple[Filter, ...]
    write: frozenset[str] = frozenset(WRITE_OPS)


@dataclass(frozen=True, slots=True)
class SyncRules:
    """A versioned rule set; a row is visible if it is in any bucket. ``unrestricted_writes``:
    writes are not checked against the buckets (``"writes": "unrestricted"``)."""

    version: int
    buckets: tuple[Bucket, ...]
    unrestricted_writes: bool = False


def _fail(message: str) -> ValidationError:
    return ValidationError(message)


def _parse_filter(bucket_name: str, j: int, raw: Any) -> Filter:
    prefix = f'Bucket "{bucket_name}" filter at index {j}'
    if not isinstance(raw, Mapping):
        raise _fail(f"{prefix} must be an object")
    column = raw.get("column")
    if not isinstance(column, str) or not column:
        raise _fail(f"{prefix} must have a non-empty column")
    op = raw.get("op")
    if not isinstance(op, str) or op not in FILTER_OPS:
        raise _fail(f"{prefix} op must be one of: {', '.join(FILTER_OPS)}")
    value = raw.get("value")
    if not isinstance(value, str) or not value:
        raise _fail(f"{prefix} must have a non-empty value")
    return Filter(column, op, value)


def _parse_bucket(i: int, raw: Any, seen: set[str]) -> Bucket:
    if not isinstance(raw, Mapping):
        raise _fail(f"Bucket at index {i} must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(f"Bucket at index {i} must have a non-empty name")
    if name in seen:
        raise _fail(f'Duplicate bucket name: "{name}"')
    seen.add(name)
    tables = raw.get("tables")
    if not isinstance(tables, list):
        raise _fail(f'Bucket "{name}" tables must be an array')
    for table in tables:
        if not isinstance(table, str) or not table:
            raise _fail(f'Bucket "{name}" tables must contain non-empty strings')
    for table in tables:
        if IDENTIFIER_RE.fullmatch(table) is None:
            raise _fail(
                f'Bucket "{name}" table "{table}" is not a valid SQL identifier '
                "(^[a-zA-Z_][a-zA-Z0-9_]{0,63}$)"
            )
    filters = raw.get("filters")
    if not isinstance(filters, list):
        raise _fail(f'Bucket "{name}" filters must be an array')
    return Bucket(
        name,
        tuple(tables),
        tuple(_parse_filter(name, j, f) for j, f in enumerate(filters)),
        _parse_write(name, raw.get("write", True)),
    )


def _parse_write(bucket_name: str, raw: Any) -> frozenset[str]:
    """A bucket's ``"write"``: ``true`` (every operation), ``false`` (none) or a list of them."""
    if raw is True:
        return frozenset(WRITE_OPS)
    if raw is False:
        return frozenset()
    message = (
        f'Bucket "{bucket_name}" write must be true, false or an array of: {", ".join(WRITE_OPS)}'
    )
    if not isinstance(raw, list) or any(not isinstance(op, str) for op in raw):
        raise _fail(message)
    unknown = [op for op in raw if op not in WRITE_OPS]
    if unknown:
        raise _fail(f"{message} (got {unknown[0]!r})")
    return frozenset(raw)


def parse_sync_rules(obj: object) -> SyncRules:
    """Validate a wire ``SyncRulesConfig`` (parsed JSON); raise :class:`ValidationError`.

    Messages are the reference ``validateSyncRules`` ones; in addition, bucket table names must
    be SQL identifiers (a table that is not one can never hold rows).
    """
    if not isinstance(obj, Mapping):
        raise _fail("Sync rules config must be an object")
    version = obj.get("version")
    if (
        isinstance(version, bool)
        or not isinstance(version, int | float)
        or (isinstance(version, float) and not version.is_integer())
        or version < 1
    ):
        raise _fail("Sync rules version must be a positive integer")
    buckets = obj.get("buckets")
    if not isinstance(buckets, list):
        raise _fail("Sync rules buckets must be an array")
    writes = obj.get("writes", "rules")
    if writes not in ("rules", UNRESTRICTED_WRITES):
        raise _fail(f'Sync rules writes must be "rules" or "{UNRESTRICTED_WRITES}"')
    seen: set[str] = set()
    return SyncRules(
        int(version),
        tuple(_parse_bucket(i, b, seen) for i, b in enumerate(buckets)),
        writes == UNRESTRICTED_WRITES,
    )


def sync_rules_to_json(rules: SyncRules) -> dict[str, Any]:
    """The wire form of ``rules``; :func:`parse_sync_rules` reads it back.

    ``"write"`` and ``"writes"`` appear only when they differ from their defaults, so rules
    without them keep the form (and the view tags, :mod:`~lakesync_platform.sync.cursors`)
    they had before writes were checked.
    """
    out: dict[str, Any] = {
        "version": rules.version,
        "buckets": [_bucket_json(b) for b in rules.buckets],
    }
    if rules.unrestricted_writes:
        out["writes"] = UNRESTRICTED_WRITES
    return out


def _bucket_json(b: Bucket) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": b.name,
        "tables": list(b.tables),
        "filters": [{"column": f.column, "op": f.op, "value": f.value} for f in b.filters],
    }
    if b.write != frozenset(WRITE_OPS):
        out["write"] = [op for op in WRITE_OPS if op in b.write]
    return out


# --- JavaScript value semantics -----------------------------------------------------------------


def js_string(value: Any) -> str:
    """JavaScript ``String(value)`` for JSON-ish values.

    ``True`` → ``"true"``, ``None`` → ``"null"``, ``3`` → ``"3"``, ``2.5`` → ``"2.5"``, a dict →
    ``"[object Object]"``, a list → its items joined by ``,`` (``null`` items as ``""``).
    """
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        return js_number(value)
    if isinstance(value, list | tuple):
        return ",".join("" if item is None else js_string(item) for item in value)
    return "[object Object]"


# StrWhiteSpaceChar: WhiteSpace (incl. every Zs) and LineTerminator.
_JS_SPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_FLOAT_PREFIX: Final = re.compile(
    r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
)


def js_parse_float(text: str) -> float:
    """JavaScript ``parseFloat``: the longest numeric prefix after leading whitespace, else NaN.

    ``"3abc"`` → 3, ``" .5"`` → 0.5, ``"1e"`` → 1, ``"-Infinity"`` → -inf, ``"true"`` → NaN.
    """
    match = _FLOAT_PREFIX.match(text.lstrip(_JS_SPACE))
    if match is None:
        return math.nan
    return float(match.group())


def _char_class(ch: str) -> int:
    category = unicodedata.category(ch)
    if category[0] in "ZPSC":  # spaces, punctuation, symbols, controls
        return 0
    if category[0] == "N":
        return 1
    return 2


def _collation_key(text: str) -> tuple[tuple[tuple[int, str], ...], str, tuple[int, ...], str]:
    decomposed = unicodedata.normalize("NFD", text)
    bases = [ch for ch in decomposed if not unicodedata.combining(ch)]
    primary = tuple((_char_class(ch), ch.casefold()) for ch in bases)
    accents = "".join(ch for ch in decomposed if unicodedata.combining(ch))
    case = tuple(1 if ch.isupper() else 0 for ch in bases)
    return primary, accents, case, text


def locale_compare(a: str, b: str) -> int:
    """An approximation of ICU root-locale ``a.localeCompare(b)``: -1, 0 or 1.

    Levels, as ICU: (1) base letters ignoring case and accents, with whitespace/punctuation/
    symbols before digits before letters; (2) accents; (3) lowercase before uppercase; then code
    points so that only equal strings compare 0. It is not a full UCA implementation
    (contractions, expansions such as ``ß``/``æ``, and ICU's "variable" weighting differ), which
    only matters for ``gt``/``lt``/``gte``/``lte`` filters on non-numeric text.
    """
    ka, kb = _collation_key(a), _collation_key(b)
    return (ka > kb) - (ka < kb)


def _compare(op: str, dv: str, rv: str) -> bool:
    nd, nr = js_parse_float(dv), js_parse_float(rv)
    numeric = nd == nd and nr == nr  # neither is NaN
    cmp = (nd > nr) - (nd < nr) if numeric else locale_compare(dv, rv)
    if op == "gt":
        return cmp > 0
    if op == "lt":
        return cmp < 0
    if op == "gte":
        return cmp >= 0
    return cmp <= 0


# --- evaluation ----------------------------------------------------------------------------------

_Test = Callable[[str], bool]


def _resolve(value: str, claims: Claims) -> tuple[str, ...]:
    if not value.startswith("jwt:"):
        return (value,)
    claim = claims.get(value[4:])
    if claim is None:
        return ()
    if isinstance(claim, str):
        return (claim,)
    return tuple(claim)


def _compile_filter(f: Filter, claims: Claims) -> _Test | None:
    """A test on ``String(row[f.column])``, or ``None`` if the filter can never match."""
    resolved = _resolve(f.value, claims)
    if not resolved:
        return None
    if f.op in ("eq", "in"):
        allowed = frozenset(resolved)
        return allowed.__contains__
    if f.op == "neq":
        denied = frozenset(resolved)
        return lambda dv: dv not in denied
    first, op = resolved[0], f.op
    return lambda dv: _compare(op, dv, first)


@dataclass(frozen=True, slots=True)
class _CompiledBucket:
    tables: frozenset[str] | None  # None: every table
    tests: tuple[tuple[str, _Test], ...]
    write: frozenset[str]
    columns: frozenset[str]  # the columns its filters test

    def matches(self, row: Mapping[str, Any]) -> bool:
        for column, test in self.tests:
            if column not in row or not test(js_string(row[column])):
                return False
        return True


class ClientView:
    """One client's view of the data under a rule set: rules compiled once against its claims.

    ``None`` rules or a rule set without buckets make everything visible.
    """

    __slots__ = ("_buckets", "_by_table", "_free", "_open", "_writers")

    def __init__(self, rules: SyncRules | None, claims: Claims) -> None:
        self._open = rules is None or not rules.buckets
        compiled: list[_CompiledBucket] = []
        for bucket in rules.buckets if rules is not None else ():
            tests = [(f.column, _compile_filter(f, claims)) for f in bucket.filters]
            if any(test is None for _, test in tests):
                continue  # a missing claim: the bucket matches nothing for this client
            compiled.append(
                _CompiledBucket(
                    frozenset(bucket.tables) if bucket.tables else None,
                    tuple((column, test) for column, test in tests if test is not None),
                    bucket.write,
                    frozenset(column for column, _ in tests),
                )
            )
        self._buckets = tuple(compiled)
        self._by_table: dict[str, tuple[_CompiledBucket, ...]] = {}
        self._writers: dict[tuple[str, str], tuple[_CompiledBucket, ...]] = {}
        self._free: dict[str, bool] = {}

    def _for_table(self, table: str) -> tuple[_CompiledBucket, ...]:
        found = self._by_table.get(table)
        if found is None:
            found = tuple(b for b in self._buckets if b.tables is None or table in b.tables)
            self._by_table[table] = found
        return found

    def table_visible(self, table: str) -> bool:
        """Whether some rows of ``table`` can be visible (some bucket can match them)."""
        return self._open or bool(self._for_table(table))

    def table_unfiltered(self, table: str) -> bool:
        """Whether every row of ``table`` is visible (no rules, or a filter-less bucket)."""
        return self._open or any(not b.tests for b in self._for_table(table))

    def row_visible(self, table: str, row: Mapping[str, Any]) -> bool:
        """Whether the row (its current ``{column: value}``) is in any bucket."""
        if self._open:
            return True
        return any(b.matches(row) for b in self._for_table(table))

    # --- writes (USING + WITH CHECK) -------------------------------------------------------

    def _writing(self, table: str, op: str) -> tuple[_CompiledBucket, ...]:
        found = self._writers.get((table, op))
        if found is None:
            found = self._writers[table, op] = tuple(
                b for b in self._for_table(table) if op in b.write
            )
        return found

    def table_writable(self, table: str) -> bool:
        """Whether some write to ``table`` can be allowed (a bucket of it allows an operation)."""
        return self._open or any(b.write for b in self._for_table(table))

    def writes_unchecked(self, table: str) -> bool:
        """Whether every write to ``table`` is allowed (no rules, or a filter-less bucket of it
        that allows every operation): the caller may skip :meth:`may_write`."""
        free = self._free.get(table)
        if free is None:
            free = self._free[table] = self._open or any(
                not b.tests and len(b.write) == len(WRITE_OPS) for b in self._for_table(table)
            )
        return free

    def may_write(
        self,
        table: str,
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> bool:
        """Whether the client may apply ``op`` (:data:`WRITE_OPS`) to a row of ``table``.

        ``before`` is the live row the change starts from (``None`` for an insert), ``after``
        the live row it leaves (``None`` for a delete); each must be in a bucket that allows
        ``op`` — the ``USING`` and ``WITH CHECK`` of row-level security, on whole rows.
        """
        if self._open:
            return True
        buckets = self._writing(table, op)
        if not buckets:
            return False
        if before is not None and not any(b.matches(before) for b in buckets):
            return False
        return after is None or any(b.matches(after) for b in buckets)

    def may_update(
        self,
        table: str,
        before: Mapping[str, Any],
        changed: Set[str],
        after: Callable[[], Mapping[str, Any]],
    ) -> bool:
        """:meth:`may_write` of an update that wrote the ``changed`` columns of a live row:
        when a bucket that holds ``before`` tests none of them, it holds the row after the
        change too, and ``after`` (the merged row, built on demand) is not looked at."""
        if self._open:
            return True
        buckets = self._writing(table, "update")
        holding = next((b for b in buckets if b.matches(before)), None)
        if holding is None:
            return False
        if holding.columns.isdisjoint(changed):
            return True
        row = after()
        return any(b.matches(row) for b in buckets)
