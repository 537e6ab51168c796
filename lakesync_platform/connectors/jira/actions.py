"""Jira actions: ``create_issue`` and ``add_comment`` (PROTOCOL.md §8), for clients of a
gateway with a registered Jira connector (actions on connector ``<its name>``).

Plain-text descriptions and comment bodies are sent as one-paragraph Atlassian Document Format
documents (what API v3 takes). Failures: Jira's 4xx answers (a missing summary, an unknown
project or issue, no permission) are not retryable; 429, 5xx, timeouts and unreachable sites
are (see :func:`~lakesync_platform.connectors.http.send_action`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import msgspec

from ...core.actions import Action, ActionContext, ActionDescriptor
from ...core.connectors import JiraOptions
from ..http import HttpSettings, SourceSession, send_action, write_retry
from .settings import ISSUE_PATH, SOURCE
from .source import BasicAuth

__all__ = ["AddCommentParams", "CreateIssueParams", "JiraActions"]


class CreateIssueParams(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """Params of ``create_issue``."""

    project_key: Annotated[str, msgspec.Meta(min_length=1, description="The project's key")]
    summary: Annotated[str, msgspec.Meta(min_length=1, description="The issue's summary")]
    issue_type: Annotated[str, msgspec.Meta(description="Issue type name")] = "Task"
    description: Annotated[str | None, msgspec.Meta(description="Plain text")] = None
    labels: list[str] = msgspec.field(default_factory=list)
    fields: Annotated[
        dict[str, Any], msgspec.Meta(description="More fields by id (e.g. customfield_10016)")
    ] = msgspec.field(default_factory=dict)


class AddCommentParams(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True):
    """Params of ``add_comment``."""

    issue_key: Annotated[str, msgspec.Meta(min_length=1, description="The issue's key")]
    body: Annotated[str, msgspec.Meta(min_length=1, description="Plain text")]


DESCRIPTORS = (
    ActionDescriptor("create_issue", "Create a Jira issue", CreateIssueParams),
    ActionDescriptor("add_comment", "Add a comment to a Jira issue", AddCommentParams),
)


def _adf(text: str) -> dict[str, Any]:
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}],
    }


class JiraActions:
    """An :class:`~lakesync_platform.core.actions.ActionHandler` on one Jira site."""

    def __init__(
        self, options: JiraOptions, api_token: str, settings: HttpSettings | None = None
    ) -> None:
        chosen = settings or HttpSettings(timeout_s=10.0, tries=3)
        self.options = options
        self.session = SourceSession(
            chosen, BasicAuth(options.email, api_token), retry=write_retry(chosen)
        )

    @property
    def descriptors(self) -> Sequence[ActionDescriptor]:
        """``create_issue`` and ``add_comment``."""
        return DESCRIPTORS

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        """Create the issue or add the comment; the result is what Jira answered."""
        base = self.options.url + ISSUE_PATH
        if action.action_type == "create_issue":
            p = msgspec.convert(action.params, CreateIssueParams)
            fields: dict[str, Any] = {
                **p.fields,
                "project": {"key": p.project_key},
                "summary": p.summary,
                "issuetype": {"name": p.issue_type},
            }
            if p.description is not None:
                fields["description"] = _adf(p.description)
            if p.labels:
                fields["labels"] = p.labels
            doc = send_action(self.session, "POST", base, SOURCE, {"fields": fields})
            return {"id": doc.get("id"), "key": doc.get("key"), "self": doc.get("self")}
        c = msgspec.convert(action.params, AddCommentParams)
        doc = send_action(
            self.session, "POST", f"{base}/{c.issue_key}/comment", SOURCE, {"body": _adf(c.body)}
        )
        return {"id": doc.get("id"), "issueKey": c.issue_key, "created": doc.get("created")}

    def close(self) -> None:
        """Release the HTTP connections."""
        self.session.close()
