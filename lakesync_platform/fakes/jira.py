"""A fake Jira Cloud site: REST API v3 in its recorded shapes, over issues a test changes.

Answered (Basic auth with the site's e-mail and API token; anything else is a 401):

* ``POST /rest/api/3/search/jql`` — ``{jql, maxResults (≤ 100), fields, nextPageToken}`` →
  ``{issues, nextPageToken?, isLast}``. The JQL understood is what a connector sends: clauses
  joined by ``AND`` — ``project is not EMPTY``, ``project = K``, ``project in (A, B)``,
  ``updated >= "yyyy-MM-dd HH:mm"`` (minutes, in the user's time zone, as Jira reads it) —
  and ``ORDER BY updated ASC`` or ``ORDER BY key ASC``; anything else is Jira's 400. The
  ``comment`` field embeds at most :attr:`FakeJira.embedded_comments` comments with their
  ``total``, as Jira's search caps embedded comments.
* ``GET /rest/api/3/issue/{key}/comment`` (``startAt``, ``maxResults``), ``GET
  /rest/api/3/project/search`` (``startAt``, ``maxResults``, ``isLast``), ``GET
  /rest/api/3/field``, ``GET /rest/api/3/myself`` (with the user's ``timeZone``).
* ``POST /rest/api/3/issue`` and ``POST /rest/api/3/issue/{key}/comment`` (what the actions
  call), with Jira's ``{"errorMessages", "errors"}`` on bad input.

A test adds, updates and deletes issues, comments, projects and custom fields; each change
stamps ``updated`` from the fake's clock (strictly increasing).
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from .server import FakeServer, Reply, Request, Route, Stamps, json_reply

__all__ = ["FakeJira", "jira_time"]

_API = "/rest/api/3"
_STANDARD_FIELDS = (
    ("summary", "Summary", "string"),
    ("description", "Description", "string"),
    ("status", "Status", "status"),
    ("priority", "Priority", "priority"),
    ("issuetype", "Issue Type", "issuetype"),
    ("assignee", "Assignee", "user"),
    ("reporter", "Reporter", "user"),
    ("labels", "Labels", "array"),
    ("created", "Created", "datetime"),
    ("updated", "Updated", "datetime"),
    ("project", "Project", "project"),
    ("comment", "Comment", "comments-page"),
)
_NOT_FOUND = "Issue does not exist or you do not have permission to see it."


def jira_time(ms: int) -> str:
    """An epoch-millisecond time as Jira writes it (``2026-01-15T10:30:00.000+0000``)."""
    at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}+0000"


def adf(text: str | None) -> dict[str, Any] | None:
    """Plain text as an Atlassian Document Format document (one paragraph)."""
    if text is None:
        return None
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}],
    }


@dataclass
class _User:
    account_id: str
    name: str
    email: str

    def json(self) -> dict[str, Any]:
        return {
            "accountId": self.account_id,
            "displayName": self.name,
            "emailAddress": self.email,
            "active": True,
        }


@dataclass
class _Comment:
    id: int
    author: _User
    body: str
    created: int
    updated: int

    def json(self, base: str, issue_id: int) -> dict[str, Any]:
        return {
            "self": f"{base}{_API}/issue/{issue_id}/comment/{self.id}",
            "id": str(self.id),
            "author": self.author.json(),
            "body": adf(self.body),
            "updateAuthor": self.author.json(),
            "created": jira_time(self.created),
            "updated": jira_time(self.updated),
            "jsdPublic": True,
        }


@dataclass
class _Issue:
    id: int
    key: str
    project: str
    summary: str
    description: str | None
    status: str
    priority: str
    issuetype: str
    assignee: _User | None
    reporter: _User
    labels: list[str]
    created: int
    updated: int
    custom: dict[str, Any] = field(default_factory=dict)
    comments: list[_Comment] = field(default_factory=list)


@dataclass
class _Project:
    id: int
    key: str
    name: str
    type: str
    lead: _User


class FakeJira(FakeServer):
    """A Jira Cloud site (see the module docstring); ``email``/``token`` are its credentials,
    ``time_zone`` the user's (how JQL dates are read)."""

    name = "jira"

    def __init__(
        self,
        *,
        email: str = "bot@example.com",
        token: str = "jira-token",
        time_zone: str = "Europe/Berlin",
        clock: Callable[[], int] | None = None,
        embedded_comments: int = 5,
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.email = email
        self.token = token
        self.time_zone = time_zone
        self.embedded_comments = embedded_comments
        self.stamp = Stamps(clock)
        self.issues: dict[str, _Issue] = {}
        self.projects: dict[str, _Project] = {}
        self.custom_fields: dict[str, tuple[str, str]] = {}  # id → (name, schema type)
        self.users = [
            _User("5b10a2844c20165700ede21g", "Ada Lovelace", "ada@example.com"),
            _User("5b10ac8d82e05b22cc7d4ef5", "Grace Hopper", "grace@example.com"),
        ]
        self._ids = itertools.count(10001)
        self._comment_ids = itertools.count(10100)
        self._keys: dict[str, itertools.count[int]] = {}
        self._searches: dict[str, list[str]] = {}
        basic = base64.b64encode(f"{email}:{token}".encode()).decode()
        self._authorization = f"Basic {basic}"

    # ------------------------------------------------------------------ changes a test makes

    def add_project(self, key: str, name: str | None = None, type_: str = "software") -> None:
        """Create a project."""
        with self.lock:
            self.projects[key] = _Project(
                next(self._ids), key, name or key.title(), type_, self.users[0]
            )
            self._keys.setdefault(key, itertools.count(1))

    def delete_project(self, key: str) -> None:
        """Delete a project and its issues."""
        with self.lock:
            del self.projects[key]
            for issue_key in [k for k, i in self.issues.items() if i.project == key]:
                del self.issues[issue_key]

    def add_custom_field(self, name: str, type_: str = "number") -> str:
        """Create a custom field (schema type ``number``, ``string``, ``option``, ``array``,
        ``user``, ``date``); returns its id ``customfield_<n>``."""
        with self.lock:
            field_id = f"customfield_{10016 + len(self.custom_fields)}"
            self.custom_fields[field_id] = (name, type_)
            return field_id

    def add_issue(
        self,
        project: str,
        summary: str,
        *,
        description: str | None = None,
        labels: Iterable[str] = (),
        assignee: int | None = 0,
        custom: Mapping[str, Any] | None = None,
        comments: Iterable[str] = (),
        at: int | None = None,
    ) -> str:
        """Create an issue in ``project`` (created if missing); returns its key. ``at`` dates
        it in the past (as an import does: created and updated then)."""
        with self.lock:
            if project not in self.projects:
                self.add_project(project)
            now = self.stamp() if at is None else at
            key = f"{project}-{next(self._keys[project])}"
            self.issues[key] = _Issue(
                next(self._ids), key, project, summary, description, "To Do", "Medium", "Task",
                None if assignee is None else self.users[assignee], self.users[1],
                list(labels), now, now, dict(custom or {}),
            )  # fmt: skip
            for body in comments:
                self._comment(key, body)
            return key

    def update_issue(self, key: str, **changes: Any) -> None:
        """Change an issue's attributes (``summary``, ``status``, ``labels``, …, or
        ``custom={field_id: value}``); ``updated`` moves."""
        with self.lock:
            issue = self.issues[key]
            for name, value in changes.items():
                if name == "custom":
                    issue.custom.update(value)
                else:
                    setattr(issue, name, value)
            issue.updated = self.stamp()

    def delete_issue(self, key: str) -> None:
        """Delete an issue (and its comments): it vanishes from every answer."""
        with self.lock:
            del self.issues[key]

    def add_comment(self, key: str, body: str) -> str:
        """Comment on an issue; returns the comment's id."""
        with self.lock:
            return self._comment(key, body)

    def delete_comment(self, key: str, comment_id: str) -> None:
        """Delete a comment (the issue's ``updated`` does not move, as in Jira)."""
        with self.lock:
            issue = self.issues[key]
            issue.comments = [c for c in issue.comments if str(c.id) != comment_id]

    def _comment(self, key: str, body: str) -> str:
        issue = self.issues[key]
        now = self.stamp()
        comment = _Comment(next(self._comment_ids), self.users[0], body, now, now)
        issue.comments.append(comment)
        issue.updated = now
        return str(comment.id)

    def generate(self, issues: int, *, projects: int = 3, comments_per_issue: int = 1) -> None:
        """Fill the site with ``issues`` issues spread over ``projects`` projects (benchmarks)."""
        points = self.add_custom_field("Story Points", "number")
        for i in range(issues):
            project = f"P{i % projects}"
            self.add_issue(
                project,
                f"Issue {i}",
                description=f"Generated issue {i}",
                labels=["generated"],
                custom={points: i % 13},
                comments=[f"comment {c}" for c in range(comments_per_issue)],
            )

    # ------------------------------------------------------------------ routing

    def routes(self) -> list[Route]:
        """The API's routes."""
        r = self.route
        return [
            r("POST", rf"{_API}/search/jql", "search", self._search),
            r("GET", rf"{_API}/issue/(?P<key>[^/]+)/comment", "comments", self._comments),
            r("POST", rf"{_API}/issue/(?P<key>[^/]+)/comment", "add_comment", self._add_comment),
            r("POST", rf"{_API}/issue", "create_issue", self._create_issue),
            r("GET", rf"{_API}/project/search", "projects", self._projects),
            r("GET", rf"{_API}/field", "fields", self._fields),
            r("GET", rf"{_API}/myself", "myself", self._myself),
        ]

    def authorised(self, request: Request) -> Reply | None:
        """Basic auth with the site's e-mail and token, as Jira Cloud's API tokens."""
        if request.headers.get("Authorization") != self._authorization:
            return Reply(401, b"Client must be authenticated to access this resource.", "text/html")
        return None

    def _search(self, request: Request) -> Reply:
        body = request.json() or {}
        try:
            matches, order = _parse_jql(str(body.get("jql", "")), ZoneInfo(self.time_zone))
        except ValueError as exc:
            return json_reply(400, {"errorMessages": [str(exc)], "errors": {}})
        limit = max(1, min(int(body.get("maxResults", 50)), 100))
        wanted = list(body.get("fields") or ["id"])
        with self.lock:
            if body.get("nextPageToken"):  # the search's keys as they were (a snapshot)
                search, _, offset = base64.b64decode(body["nextPageToken"]).decode().partition(":")
                keys, start = self._searches.get(search, []), int(offset)
            else:
                found = sorted((i for i in self.issues.values() if matches(i)), key=order)
                search, keys, start = str(next(self._ids)), [i.key for i in found], 0
                self._searches[search] = keys
            page = [self.issues[k] for k in keys[start : start + limit] if k in self.issues]
            docs = [self._issue_json(i, wanted) for i in page]
            last = start + limit >= len(keys)
            if last:
                self._searches.pop(search, None)
        doc: dict[str, Any] = {"issues": docs, "isLast": last}
        if not last:
            token = f"{search}:{start + limit}".encode()
            doc["nextPageToken"] = base64.b64encode(token).decode()
        return json_reply(200, doc)

    def _issue_json(self, issue: _Issue, wanted: list[str]) -> dict[str, Any]:
        base = self.url
        values: dict[str, Any] = {
            "summary": issue.summary,
            "description": adf(issue.description),
            "status": {"name": issue.status, "id": "10000", "statusCategory": {"key": "new"}},
            "priority": {"name": issue.priority, "id": "3"},
            "issuetype": {"name": issue.issuetype, "id": "10002", "subtask": False},
            "assignee": None if issue.assignee is None else issue.assignee.json(),
            "reporter": issue.reporter.json(),
            "labels": list(issue.labels),
            "created": jira_time(issue.created),
            "updated": jira_time(issue.updated),
            "project": {
                "id": str(self.projects[issue.project].id),
                "key": issue.project,
                "name": self.projects[issue.project].name,
            },
            "comment": {
                "comments": [
                    c.json(base, issue.id) for c in issue.comments[: self.embedded_comments]
                ],
                "maxResults": self.embedded_comments,
                "total": len(issue.comments),
                "startAt": 0,
            },
        }
        for field_id, (_name, type_) in self.custom_fields.items():
            value = issue.custom.get(field_id)
            if type_ == "option" and value is not None:
                value = {"value": value, "id": "10050"}
            values[field_id] = value
        fields = {k: values[k] for k in wanted if k in values}
        return {
            "id": str(issue.id),
            "key": issue.key,
            "self": f"{base}{_API}/issue/{issue.id}",
            "fields": fields,
        }

    def _comments(self, request: Request) -> Reply:
        start = int(request.query.get("startAt", 0))
        limit = max(1, min(int(request.query.get("maxResults", 100)), 100))
        with self.lock:
            issue = self.issues.get(request.match["key"])
            if issue is None:
                return json_reply(404, {"errorMessages": [_NOT_FOUND], "errors": {}})
            comments = [c.json(self.url, issue.id) for c in issue.comments[start : start + limit]]
            total = len(issue.comments)
        return json_reply(
            200, {"startAt": start, "maxResults": limit, "total": total, "comments": comments}
        )

    def _projects(self, request: Request) -> Reply:
        start = int(request.query.get("startAt", 0))
        limit = max(1, min(int(request.query.get("maxResults", 50)), 50))
        with self.lock:
            projects = sorted(self.projects.values(), key=lambda p: p.key)
            values = [
                {
                    "self": f"{self.url}{_API}/project/{p.id}",
                    "id": str(p.id),
                    "key": p.key,
                    "name": p.name,
                    "projectTypeKey": p.type,
                    "simplified": False,
                    "style": "classic",
                    "lead": p.lead.json(),
                }
                for p in projects[start : start + limit]
            ]
        last = start + limit >= len(projects)
        return json_reply(
            200,
            {
                "maxResults": limit,
                "startAt": start,
                "total": len(projects),
                "isLast": last,
                "values": values,
            },
        )

    def _fields(self, _request: Request) -> Reply:
        with self.lock:
            docs = [
                {"id": fid, "key": fid, "name": name, "custom": False, "schema": {"type": typ}}
                for fid, name, typ in _STANDARD_FIELDS
            ]
            for fid, (name, typ) in self.custom_fields.items():
                number = int(fid.rsplit("_", 1)[1])
                schema = {"type": typ, "custom": f"com.example:{typ}", "customId": number}
                docs.append({"id": fid, "key": fid, "name": name, "custom": True, "schema": schema})
        return json_reply(200, docs)

    def _myself(self, _request: Request) -> Reply:
        user = self.users[0].json()
        return json_reply(200, {**user, "emailAddress": self.email, "timeZone": self.time_zone})

    def _create_issue(self, request: Request) -> Reply:
        fields = (request.json() or {}).get("fields") or {}
        errors: dict[str, str] = {}
        project = (fields.get("project") or {}).get("key")
        if project not in self.projects:
            errors["project"] = "valid project is required"
        if not fields.get("summary"):
            errors["summary"] = "You must specify a summary of the issue."
        if not (fields.get("issuetype") or {}).get("name"):
            errors["issuetype"] = "valid issue type is required"
        if errors:
            return json_reply(400, {"errorMessages": [], "errors": errors})
        key = self.add_issue(
            str(project),
            fields["summary"],
            description=_adf_text(fields.get("description")),
            labels=fields.get("labels") or (),
        )
        issue = self.issues[key]
        return json_reply(
            201, {"id": str(issue.id), "key": key, "self": f"{self.url}{_API}/issue/{issue.id}"}
        )

    def _add_comment(self, request: Request) -> Reply:
        key = request.match["key"]
        body = _adf_text((request.json() or {}).get("body"))
        if key not in self.issues:
            return json_reply(404, {"errorMessages": [_NOT_FOUND], "errors": {}})
        if not body:
            errors = {"comment": "Comment body can not be empty!"}
            return json_reply(400, {"errorMessages": [], "errors": errors})
        comment_id = self.add_comment(key, body)
        with self.lock:
            issue = self.issues[key]
            comment = next(c for c in issue.comments if str(c.id) == comment_id)
            return json_reply(201, comment.json(self.url, issue.id))


def _adf_text(doc: Any) -> str | None:
    """The text of an ADF document (or a plain string)."""
    if doc is None or isinstance(doc, str):
        return doc
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            if node.get("type") == "text":
                out.append(str(node.get("text", "")))
            for child in node.get("content") or ():
                walk(child)

    walk(doc)
    return "".join(out)


_ORDER = re.compile(r"\s+ORDER\s+BY\s+(updated|key)\s+ASC\s*$", re.IGNORECASE)
_UPDATED = re.compile(r'updated\s*>=\s*"(\d{4}-\d{2}-\d{2} \d{2}:\d{2})"', re.IGNORECASE)
_PROJECT_EQ = re.compile(r"project\s*=\s*\"?([A-Z][A-Z0-9_]*)\"?", re.IGNORECASE)
_PROJECT_IN = re.compile(r"project\s+in\s*\(([^)]*)\)", re.IGNORECASE)
_NOT_EMPTY = re.compile(r"project\s+is\s+not\s+EMPTY", re.IGNORECASE)


def _updated_since(ms: int) -> Callable[[_Issue], bool]:
    return lambda issue: issue.updated >= ms


def _in_projects(keys: set[str]) -> Callable[[_Issue], bool]:
    return lambda issue: issue.project in keys


def _parse_jql(
    jql: str, zone: ZoneInfo
) -> tuple[Callable[[_Issue], bool], Callable[[_Issue], Any]]:
    """A predicate and a sort key for the JQL a connector sends (raises ValueError)."""
    order: Callable[[_Issue], Any] = lambda i: (i.created, i.id)  # noqa: E731
    found = _ORDER.search(jql)
    if found:
        jql = jql[: found.start()]
        if found.group(1).lower() == "updated":
            order = lambda i: (i.updated, i.id)  # noqa: E731
        else:
            order = lambda i: (i.project, i.id)  # noqa: E731
    checks: list[Callable[[_Issue], bool]] = []
    for clause in re.split(r"\s+AND\s+", jql.strip(), flags=re.IGNORECASE):
        clause = clause.strip().strip("()").strip()
        if not clause:
            continue
        if m := _UPDATED.fullmatch(clause):
            local = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M").replace(tzinfo=zone)
            checks.append(_updated_since(int(local.timestamp() * 1000)))
        elif m := _PROJECT_EQ.fullmatch(clause):
            checks.append(_in_projects({m.group(1)}))
        elif m := _PROJECT_IN.fullmatch(clause):
            checks.append(_in_projects({k.strip().strip('"') for k in m.group(1).split(",")}))
        elif _NOT_EMPTY.fullmatch(clause):
            continue
        else:
            raise ValueError(f"Error in the JQL Query: the clause {clause!r} is not understood.")
    return (lambda issue: all(check(issue) for check in checks)), order
