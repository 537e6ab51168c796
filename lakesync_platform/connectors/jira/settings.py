"""Jira Cloud's REST API v3 as the connector uses it: endpoints, fields, tables and columns.

Issues come from ``POST /rest/api/3/search/jql`` (paged by ``nextPageToken``) with their
comments embedded (the ``comment`` field; an issue with more comments than Jira embeds is
paged through ``GET /rest/api/3/issue/{key}/comment``); projects from ``GET
/rest/api/3/project/search`` (paged by ``startAt``); custom fields' names from ``GET
/rest/api/3/field``; the user's time zone (how Jira reads dates in JQL) from ``GET
/rest/api/3/myself``. Tables, row ids and columns are the reference's (PROTOCOL.md §11.3).
"""

from __future__ import annotations

from typing import Any, Final

from ..http import Endpoint, NextOffset, NextToken

__all__ = [
    "COMMENTS_TABLE",
    "COMMENT_COLUMNS",
    "FIELDS_PATH",
    "ISSUES_TABLE",
    "ISSUE_COLUMNS",
    "ISSUE_FIELDS",
    "MYSELF_PATH",
    "PROJECTS_TABLE",
    "PROJECT_COLUMNS",
    "SOURCE",
    "comments_endpoint",
    "projects_endpoint",
    "search_endpoint",
]

SOURCE: Final = "Jira"
API: Final = "/rest/api/3"
FIELDS_PATH: Final = f"{API}/field"
MYSELF_PATH: Final = f"{API}/myself"
ISSUE_PATH: Final = f"{API}/issue"

ISSUES_TABLE: Final = "jira_issues"
COMMENTS_TABLE: Final = "jira_comments"
PROJECTS_TABLE: Final = "jira_projects"

ISSUE_FIELDS: Final = (
    "summary", "description", "status", "priority", "assignee", "reporter", "labels",
    "created", "updated", "project", "issuetype",
)  # fmt: skip
"""The standard fields a poll asks for (the reference's), besides ``comment`` and the custom
fields."""
ISSUE_COLUMNS: Final = (
    "jira_id", "key", "summary", "description", "status", "priority", "issue_type",
    "assignee_name", "assignee_email", "reporter_name", "reporter_email", "labels",
    "project_key", "project_name", "created", "updated",
)  # fmt: skip
COMMENT_COLUMNS: Final = (
    "jira_id", "issue_key", "body", "author_name", "author_email", "created", "updated",
)  # fmt: skip
PROJECT_COLUMNS: Final = ("jira_id", "key", "name", "project_type", "lead_name")


def search_endpoint(jql: str, fields: list[str], page_size: int) -> Endpoint:
    """The issue search of a poll or a census sweep."""
    body: dict[str, Any] = {"jql": jql, "maxResults": page_size, "fields": fields}
    return Endpoint(
        f"{API}/search/jql",
        "POST",
        json=body,
        records_path=("issues",),
        paginator=NextToken(),
        source=SOURCE,
    )


def comments_endpoint(issue_key: str, start_at: int) -> Endpoint:
    """An issue's comments from ``start_at`` on (those its search result did not embed)."""
    return Endpoint(
        f"{ISSUE_PATH}/{issue_key}/comment",
        params={"startAt": start_at, "maxResults": 100},
        records_path=("comments",),
        paginator=NextOffset(),
        source=SOURCE,
    )


def projects_endpoint() -> Endpoint:
    """Every project, with its lead."""
    return Endpoint(
        f"{API}/project/search",
        params={"maxResults": 50, "expand": "lead"},
        records_path=("values",),
        paginator=NextOffset(),
        source=SOURCE,
    )
