"""Jira record → row mapping and the JQL of a poll, as pure functions on records in the shapes
Jira Cloud's REST API v3 answers with (search results, comments, projects, fields)."""

from __future__ import annotations

import json
from typing import Any

from lakesync_platform.connectors.jira.records import (
    comment_change,
    custom_columns,
    issue_change,
    issue_jql,
    issues_schema,
    jira_zone,
    next_cursor,
    project_change,
)
from lakesync_platform.connectors.jira.settings import ISSUE_COLUMNS

ADF = {
    "type": "doc",
    "version": 1,
    "content": [{"type": "paragraph", "content": [{"type": "text", "text": "Crash on start"}]}],
}
ISSUE: dict[str, Any] = {
    "expand": "renderedFields,names,schema,operations,editmeta,changelog,versionedRepresentations",
    "id": "10068",
    "self": "https://acme.atlassian.net/rest/api/3/issue/10068",
    "key": "ENG-42",
    "fields": {
        "summary": "App crashes",
        "description": ADF,
        "status": {"name": "In Progress", "id": "3", "statusCategory": {"key": "indeterminate"}},
        "priority": {"name": "High", "id": "2"},
        "issuetype": {"name": "Bug", "id": "10004", "subtask": False},
        "assignee": {
            "accountId": "5b10a2844c20165700ede21g",
            "displayName": "Mia Krystof",
            "emailAddress": "mia@example.com",
            "active": True,
        },
        "reporter": {"accountId": "5b10ac8d", "displayName": "Émile Zola", "active": True},
        "labels": ["mobile", "crash"],
        "created": "2026-01-15T10:30:00.000+0100",
        "updated": "2026-01-16T09:05:12.345+0100",
        "project": {"id": "10000", "key": "ENG", "name": "Engineering"},
        "customfield_10016": 5.0,
        "customfield_10020": {"self": "…", "value": "Blue", "id": "10050"},
        "customfield_10030": [{"value": "iOS"}, {"value": "Android"}],
    },
}
FIELDS = [
    {"id": "summary", "name": "Summary", "custom": False, "schema": {"type": "string"}},
    {"id": "customfield_10030", "name": "Platforms", "custom": True, "schema": {"type": "array"}},
    {
        "id": "customfield_10016",
        "name": "Story Points",
        "custom": True,
        "schema": {"type": "number", "customId": 10016},
    },
    {"id": "customfield_10020", "name": "Status", "custom": True, "schema": {"type": "option"}},
    {"id": "customfield_10040", "name": "Story points", "custom": True, "schema": {"type": "any"}},
]


def test_an_issue_becomes_the_references_row_plus_its_custom_fields() -> None:
    custom = custom_columns(FIELDS, None)
    assert [(c.field_id, c.column, c.type) for c in custom] == [
        ("customfield_10016", "story_points", "number"),
        ("customfield_10020", "status_10020", "string"),  # "status" is a standard column
        ("customfield_10030", "platforms", "json"),
        ("customfield_10040", "story_points_10040", "json"),  # a later field never renames
    ]
    change = issue_change(ISSUE, custom)
    assert change.row_id == "ENG-42" and change.table == "jira_issues"
    assert change.row == {
        "jira_id": "10068",
        "key": "ENG-42",
        "summary": "App crashes",
        "description": json.dumps(ADF, separators=(",", ":")),
        "status": "In Progress",
        "priority": "High",
        "issue_type": "Bug",
        "assignee_name": "Mia Krystof",
        "assignee_email": "mia@example.com",
        "reporter_name": "Émile Zola",
        "reporter_email": None,  # hidden by the user's privacy settings: missing → null
        "labels": '["mobile","crash"]',
        "project_key": "ENG",
        "project_name": "Engineering",
        "created": "2026-01-15T10:30:00.000+0100",
        "updated": "2026-01-16T09:05:12.345+0100",
        "story_points": 5.0,
        "status_10020": "Blue",
        "platforms": [{"value": "iOS"}, {"value": "Android"}],
        "story_points_10040": None,
    }
    schema = issues_schema(custom)
    assert schema.column_names[: len(ISSUE_COLUMNS)] == ISSUE_COLUMNS
    assert schema.column("story_points").type == "number"  # type: ignore[union-attr]
    picked = custom_columns(FIELDS, ["story points", "customfield_10030"])
    assert [c.column for c in picked] == ["story_points", "platforms", "story_points_10040"]


def test_an_issue_with_no_optional_fields_maps_them_to_null() -> None:
    bare = {"id": "1", "key": "OPS-1", "fields": {"summary": "x", "assignee": None}}
    row = issue_change(bare).row
    assert row is not None and row["assignee_name"] is None and row["labels"] is None
    assert row["description"] is None and row["status"] is None


def test_comments_and_projects_use_the_references_ids_and_columns() -> None:
    comment = {
        "self": "https://acme.atlassian.net/rest/api/3/issue/10068/comment/10100",
        "id": "10100",
        "author": {"displayName": "Mia Krystof", "emailAddress": "mia@example.com"},
        "body": ADF,
        "created": "2026-01-15T11:00:00.000+0000",
        "updated": "2026-01-15T11:00:00.000+0000",
        "jsdPublic": True,
    }
    c = comment_change("ENG-42", comment)
    assert (c.row_id, c.table) == ("ENG-42:10100", "jira_comments")
    assert c.row == {
        "jira_id": "10100",
        "issue_key": "ENG-42",
        "body": json.dumps(ADF, separators=(",", ":")),
        "author_name": "Mia Krystof",
        "author_email": "mia@example.com",
        "created": "2026-01-15T11:00:00.000+0000",
        "updated": "2026-01-15T11:00:00.000+0000",
    }
    project = {
        "id": "10000",
        "key": "ENG",
        "name": "Engineering",
        "projectTypeKey": "software",
        "lead": {"displayName": "Mia Krystof"},
    }
    p = project_change(project)
    assert (p.row_id, p.table) == ("ENG", "jira_projects")
    assert p.row == {
        "jira_id": "10000",
        "key": "ENG",
        "name": "Engineering",
        "project_type": "software",
        "lead_name": "Mia Krystof",
    }


def test_the_cursor_is_the_latest_update_in_utc() -> None:
    later = {"fields": {"updated": "2026-01-16T10:00:00.000+0200"}}  # 08:00 UTC
    state = next_cursor({}, [ISSUE, later])
    assert state == {"updated": "2026-01-16T08:05:12.345+00:00"}  # ISSUE: 09:05 +01:00
    assert next_cursor(state, []) == state
    assert next_cursor({}, []) == {}


def test_the_jql_reads_the_cursor_minus_the_lookback_in_the_users_zone() -> None:
    assert issue_jql("", {}, 60_000, None) == "project is not EMPTY ORDER BY updated ASC"
    state = {"updated": "2026-01-16T08:05:12.345+00:00"}
    berlin = jira_zone("Europe/Berlin")
    # 08:05:12 UTC − 1 min = 08:04 UTC = 09:04 in Berlin (minutes: rounded down)
    assert issue_jql("project = ENG", state, 60_000, berlin) == (
        '(project = ENG) AND updated >= "2026-01-16 09:04" ORDER BY updated ASC'
    )
    # a zone this machine does not know: 14 hours earlier, so nothing is skipped
    assert jira_zone("Mars/Olympus") is None
    assert issue_jql("", state, 0, None) == 'updated >= "2026-01-15 18:05" ORDER BY updated ASC'
