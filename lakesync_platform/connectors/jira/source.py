"""A Jira Cloud poll: the issues stream (with comments), the projects stream, the census.

Each run first reads the custom fields (``GET /rest/api/3/field``: a field created since the
last run becomes a column of ``jira_issues``, added to the table's schema before rows carrying
it are appended) and the user's time zone. The issues stream then searches ``<jql> AND updated
>= "<cursor − lookback>" ORDER BY updated ASC`` page by page; each page's state is the latest
``updated`` it holds, saved once the page's rows are committed. Every issue's comments come
with it (embedded in the search; paged through the comment endpoint when Jira embeds fewer than
the issue has). The projects stream lists every project each run (a few pages; unchanged
projects append nothing). Every ``censusEvery`` runs the census sweeps issue keys, comment ids
and project keys: what vanished is deleted.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

from ...core.connectors import JiraOptions
from ...core.schema import TableSchema
from ..census import CensusDiffer, CensusStream
from ..http import SessionFactory, SourceSession, fetch
from ..model import Change, Page, Stream
from .records import (
    CustomColumn,
    comment_change,
    comment_row_id,
    comments_schema,
    custom_columns,
    issue_change,
    issue_jql,
    issues_schema,
    jira_zone,
    next_cursor,
    project_change,
    projects_schema,
)
from .settings import (
    COMMENTS_TABLE,
    FIELDS_PATH,
    ISSUE_FIELDS,
    ISSUES_TABLE,
    MYSELF_PATH,
    PROJECTS_TABLE,
    SOURCE,
    comments_endpoint,
    projects_endpoint,
    search_endpoint,
)

__all__ = ["BasicAuth", "JiraSource"]


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """Jira Cloud's API-token authentication: HTTP Basic with the account's e-mail."""

    email: str
    api_token: str

    def authenticate(self, session: requests.Session) -> None:
        """Set the session's credentials (a 401 again means they are wrong)."""
        token = base64.b64encode(f"{self.email}:{self.api_token}".encode()).decode()
        session.headers["Authorization"] = f"Basic {token}"
        session.headers["Accept"] = "application/json"


@dataclass
class _Discovery:
    """What a run learns first: the custom columns and the user's time zone."""

    custom: list[CustomColumn]
    time_zone: str | None


@dataclass
class JiraSource:
    """The streams of one Jira connector's poll. ``api_token`` is the resolved secret;
    ``clock`` (epoch ms) dates the census's report."""

    options: JiraOptions
    api_token: str
    make_session: SessionFactory
    clock: Callable[[], int] = lambda: 0
    session: SourceSession = field(init=False)
    _discovered: _Discovery | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.session = self.make_session(BasicAuth(self.options.email, self.api_token))

    def close(self) -> None:
        """Release the HTTP connections."""
        self.session.close()

    def _get(self, path: str) -> Any:
        return fetch(self.session, "GET", self.options.url + path, SOURCE).json()

    def discover(self) -> _Discovery:
        """The custom columns and time zone (read once per run)."""
        if self._discovered is None:
            fields = self._get(FIELDS_PATH)
            listed = fields if isinstance(fields, list) else []
            custom = custom_columns(listed, self.options.custom_fields)
            zone = self._get(MYSELF_PATH).get("timeZone")
            self._discovered = _Discovery(custom, zone if isinstance(zone, str) else None)
        return self._discovered

    def schemas(self) -> list[TableSchema]:
        """The tables this connector writes, with the columns of today's custom fields."""
        out = [issues_schema(self.discover().custom)]
        if self.options.include_comments:
            out.append(comments_schema())
        if self.options.include_projects:
            out.append(projects_schema())
        return out

    def streams(self) -> list[Stream]:
        """Issues (with comments), then projects."""
        streams: list[Stream] = [_IssuesStream(self)]
        if self.options.include_projects:
            streams.append(_ProjectsStream(self))
        return streams

    def census_stream(self, differ: Callable[[], CensusDiffer]) -> CensusStream:
        """The census of issues, comments and projects (due every ``censusEvery`` runs; run
        it after :meth:`streams`), ``differ`` opening its comparison."""
        return CensusStream(
            ISSUES_TABLE,
            self.options.census_every,
            self.sweep,
            differ,
            lambda: self.session.calls,
            self.clock,
        )

    def comments_of(self, issue: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """Every comment of an issue of a search page (the embedded ones, then the rest)."""
        embedded = (issue.get("fields") or {}).get("comment") or {}
        comments = list(embedded.get("comments") or [])
        total = embedded.get("total")
        if isinstance(total, int) and total > len(comments):
            for page in comments_endpoint(issue["key"], len(comments)).pages(
                self.session, self.options.url
            ):
                comments.extend(page)
        return comments

    def sweep(self) -> Iterator[tuple[str, str]]:
        """Every ``(table, row id)`` the site holds now (the census's id-only sweep)."""
        fields = ["comment"] if self.options.include_comments else ["key"]
        jql = f"({self.options.jql}) ORDER BY key ASC" if self.options.jql.strip() else (
            "project is not EMPTY ORDER BY key ASC"
        )  # fmt: skip
        endpoint = search_endpoint(jql, fields, self.options.page_size)
        for issues in endpoint.pages(self.session, self.options.url):
            for issue in issues:
                yield ISSUES_TABLE, str(issue["key"])
                if self.options.include_comments:
                    for comment in self.comments_of(issue):
                        yield COMMENTS_TABLE, comment_row_id(issue["key"], comment["id"])
        if self.options.include_projects:
            for projects in projects_endpoint().pages(self.session, self.options.url):
                for project in projects:
                    yield PROJECTS_TABLE, str(project["key"])


class _IssuesStream:
    """Issues updated since the cursor, each with its comments."""

    name = "issues"
    table = ISSUES_TABLE

    def __init__(self, source: JiraSource) -> None:
        self.source = source

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """One page per search page; state ``{"updated": <latest, UTC>}``."""
        src, opts = self.source, self.source.options
        calls = src.session.calls
        found = src.discover()
        schemas = src.schemas()
        fields = [*ISSUE_FIELDS, *(c.field_id for c in found.custom)]
        if opts.include_comments:
            fields.append("comment")
        jql = issue_jql(opts.jql, state, opts.lookback_ms, jira_zone(found.time_zone))
        current: Mapping[str, Any] = state
        for issues in search_endpoint(jql, fields, opts.page_size).pages(src.session, opts.url):
            changes: list[Change] = []
            for issue in issues:
                changes.append(issue_change(issue, found.custom))
                if opts.include_comments:
                    changes.extend(comment_change(issue["key"], c) for c in src.comments_of(issue))
            current = next_cursor(current, issues)
            yield Page(changes, current, api_calls=src.session.calls - calls, schemas=schemas)
            calls, schemas = src.session.calls, []


class _ProjectsStream:
    """Every project, each run."""

    name = "projects"
    table = PROJECTS_TABLE

    def __init__(self, source: JiraSource) -> None:
        self.source = source

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """One page per project page (no cursor: the list is short and read whole)."""
        src = self.source
        calls = src.session.calls
        for projects in projects_endpoint().pages(src.session, src.options.url):
            yield Page(
                [project_change(p) for p in projects], {}, api_calls=src.session.calls - calls
            )
            calls = src.session.calls
