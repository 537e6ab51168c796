"""Jira records → rows, custom fields → columns, and the JQL of a poll: pure functions.

Rows follow the reference (PROTOCOL.md §11.3): an issue keyed by its ``key`` (its description
as the JSON of its Atlassian Document Format, its labels as a JSON list), a comment keyed by
``<issue key>:<comment id>``, a project keyed by its ``key``; a missing value is ``null``.
Custom fields become columns named after the field (``Story Points`` → ``story_points``); a
name that clashes with a standard column or an earlier custom field gets the field's number
(``status_10021``), and fields are ordered by number, so a field created later never renames
an earlier one.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ...core.delta import IDENTIFIER_RE
from ...core.schema import ColumnSchema, TableSchema
from ..model import Change
from .settings import (
    COMMENT_COLUMNS,
    COMMENTS_TABLE,
    ISSUE_COLUMNS,
    ISSUES_TABLE,
    PROJECT_COLUMNS,
    PROJECTS_TABLE,
)

__all__ = [
    "CustomColumn",
    "comment_change",
    "comment_row_id",
    "comments_schema",
    "custom_columns",
    "issue_change",
    "issue_jql",
    "issues_schema",
    "jira_zone",
    "next_cursor",
    "parse_jira_time",
    "project_change",
    "projects_schema",
]

_NUMBER_TYPES: Final = frozenset({"number"})
_TEXT_TYPES: Final = frozenset(
    {"string", "date", "datetime", "option", "user", "priority", "status", "project",
     "version", "group", "resolution", "securitylevel", "issuetype", "option-with-child"}
)  # fmt: skip
_MAX_TZ_OFFSET: Final = dt.timedelta(hours=14)


@dataclass(frozen=True, slots=True)
class CustomColumn:
    """A custom field kept as a column: its id, its column name, its column type."""

    field_id: str
    column: str
    type: str


def _compact(value: Any) -> str | None:
    """JSON as the reference writes it (``JSON.stringify``: no spaces, Unicode kept)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def _column_name(name: str) -> str:
    snake = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()
    if snake and snake[0].isdigit():
        snake = "cf_" + snake
    return snake[:56]


def custom_columns(
    fields: Sequence[Mapping[str, Any]], wanted: Sequence[str] | None
) -> list[CustomColumn]:
    """The custom fields of ``GET /rest/api/3/field`` kept as columns: all of them, or those
    named in ``wanted`` (by id or name, any case)."""
    picked = {w.lower() for w in wanted} if wanted is not None else None
    custom = [f for f in fields if f.get("custom") and isinstance(f.get("id"), str)]
    custom.sort(key=lambda f: (_field_number(f["id"]), f["id"]))
    taken = set(ISSUE_COLUMNS)
    out: list[CustomColumn] = []
    for f in custom:
        if picked is not None and not {f["id"].lower(), str(f.get("name", "")).lower()} & picked:
            continue
        number = _field_number(f["id"])
        column = _column_name(str(f.get("name") or "")) or f"cf_{number}"
        if column in taken or not IDENTIFIER_RE.fullmatch(column):
            column = f"{column}_{number}" if column else f"cf_{number}"
        taken.add(column)
        kind = str(_dig(f, "schema", "type") or "any")
        typ = "number" if kind in _NUMBER_TYPES else "string" if kind in _TEXT_TYPES else "json"
        out.append(CustomColumn(f["id"], column, typ))
    return out


def _field_number(field_id: str) -> int:
    tail = field_id.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _custom_value(value: Any, typ: str) -> Any:
    """A custom field's value for its column: an option's value, a user's or a named object's
    name for text columns; numbers as numbers; anything else as JSON."""
    if value is None:
        return None
    if typ == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if typ == "string":
        if isinstance(value, Mapping):
            for key in ("value", "displayName", "name", "key"):
                if isinstance(value.get(key), str):
                    return value[key]
            return _compact(value)
        return value if isinstance(value, str) else _compact(value)
    return value


def issue_change(issue: Mapping[str, Any], custom: Sequence[CustomColumn] = ()) -> Change:
    """An issue of a search result as a row of ``jira_issues`` (keyed by its key)."""
    f = issue.get("fields") or {}
    labels = f.get("labels")
    row: dict[str, Any] = {
        "jira_id": issue.get("id"),
        "key": issue.get("key"),
        "summary": f.get("summary"),
        "description": _compact(f.get("description")),
        "status": _dig(f, "status", "name"),
        "priority": _dig(f, "priority", "name"),
        "issue_type": _dig(f, "issuetype", "name"),
        "assignee_name": _dig(f, "assignee", "displayName"),
        "assignee_email": _dig(f, "assignee", "emailAddress"),
        "reporter_name": _dig(f, "reporter", "displayName"),
        "reporter_email": _dig(f, "reporter", "emailAddress"),
        "labels": _compact(labels) if labels is not None else None,
        "project_key": _dig(f, "project", "key"),
        "project_name": _dig(f, "project", "name"),
        "created": f.get("created"),
        "updated": f.get("updated"),
    }
    for col in custom:
        row[col.column] = _custom_value(f.get(col.field_id), col.type)
    return Change(str(issue["key"]), row, ISSUES_TABLE)


def comment_row_id(issue_key: str, comment_id: Any) -> str:
    """A comment's row id, ``<issue key>:<comment id>``."""
    return f"{issue_key}:{comment_id}"


def comment_change(issue_key: str, comment: Mapping[str, Any]) -> Change:
    """A comment as a row of ``jira_comments``."""
    row = {
        "jira_id": comment.get("id"),
        "issue_key": issue_key,
        "body": _compact(comment.get("body")),
        "author_name": _dig(comment, "author", "displayName"),
        "author_email": _dig(comment, "author", "emailAddress"),
        "created": comment.get("created"),
        "updated": comment.get("updated"),
    }
    return Change(comment_row_id(issue_key, comment["id"]), row, COMMENTS_TABLE)


def project_change(project: Mapping[str, Any]) -> Change:
    """A project as a row of ``jira_projects``."""
    row = {
        "jira_id": project.get("id"),
        "key": project.get("key"),
        "name": project.get("name"),
        "project_type": project.get("projectTypeKey"),
        "lead_name": _dig(project, "lead", "displayName"),
    }
    return Change(str(project["key"]), row, PROJECTS_TABLE)


def _schema(table: str, columns: Sequence[str], extra: Sequence[CustomColumn] = ()) -> TableSchema:
    cols = [ColumnSchema(c, "string") for c in columns]
    cols += [ColumnSchema(c.column, c.type) for c in extra]
    return TableSchema(table, tuple(cols))


def issues_schema(custom: Sequence[CustomColumn] = ()) -> TableSchema:
    """``jira_issues``: the reference's columns (strings) and one per kept custom field."""
    return _schema(ISSUES_TABLE, ISSUE_COLUMNS, custom)


def comments_schema() -> TableSchema:
    """``jira_comments``."""
    return _schema(COMMENTS_TABLE, COMMENT_COLUMNS)


def projects_schema() -> TableSchema:
    """``jira_projects``."""
    return _schema(PROJECTS_TABLE, PROJECT_COLUMNS)


def parse_jira_time(value: str) -> dt.datetime:
    """A time as Jira writes it (``2026-01-15T10:30:00.000+0000``), timezone-aware."""
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%f%z")


def jira_zone(name: str | None) -> ZoneInfo | None:
    """The user's time zone (``None`` when Jira names none this machine knows)."""
    try:
        return ZoneInfo(name) if name else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


def next_cursor(state: Mapping[str, Any], issues: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The state after a page of issues: the latest ``updated`` seen, in UTC ISO 8601."""
    latest = state.get("updated")
    for issue in issues:
        raw = _dig(issue, "fields", "updated")
        if isinstance(raw, str):
            at = parse_jira_time(raw).astimezone(dt.UTC).isoformat(timespec="milliseconds")
            latest = at if latest is None or at > latest else latest
    return {} if latest is None else {**state, "updated": latest}


def issue_jql(jql: str, state: Mapping[str, Any], lookback_ms: int, zone: ZoneInfo | None) -> str:
    """The JQL of a poll: the configured filter, ``updated >= "<cursor − lookback>"`` in the
    user's time zone (Jira reads JQL dates there, to the minute: the minute is rounded down),
    ordered by ``updated``. Without a known zone the bound moves 14 hours earlier (the widest
    offset), so no update is ever skipped."""
    clauses = [f"({jql.strip()})"] if jql.strip() else []
    since = state.get("updated")
    if isinstance(since, str):
        at = dt.datetime.fromisoformat(since) - dt.timedelta(milliseconds=lookback_ms)
        local = at.astimezone(zone) if zone is not None else at - _MAX_TZ_OFFSET
        clauses.append(f'updated >= "{local.strftime("%Y-%m-%d %H:%M")}"')
    where = " AND ".join(clauses) or "project is not EMPTY"
    return f"{where} ORDER BY updated ASC"
