"""Salesforce actions: ``create_record`` and ``update_record`` (PROTOCOL.md §8), for clients
of a gateway with a registered Salesforce connector (actions on connector ``<its name>``).

Field names are Salesforce's API names (``Name``, ``Tier__c``). Failures: Salesforce's 4xx
answers (a missing required field, an unknown field or record) are not retryable; 429, 5xx,
``REQUEST_LIMIT_EXCEEDED`` (the daily allowance is spent: it comes back), timeouts and an
unreachable org are. An expired session is renewed once through the OAuth flow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import msgspec
import requests

from ...core.actions import Action, ActionContext, ActionDescriptor
from ...core.connectors import SalesforceOptions
from ...core.errors import ActionError, AdapterError
from ..http import HttpSettings, SourceSession, send_action, write_retry
from .auth import LoginRefused, SalesforceAuth, SalesforceSecrets
from .settings import SOURCE, data_path

__all__ = ["CreateRecordParams", "SalesforceActions", "UpdateRecordParams"]

_SOBJECT = r"^[A-Za-z][A-Za-z0-9_]*$"
_RECORD_ID = r"^[A-Za-z0-9]{15}([A-Za-z0-9]{3})?$"


class CreateRecordParams(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Params of ``create_record``."""

    sobject: Annotated[str, msgspec.Meta(pattern=_SOBJECT, description="sObject API name")]
    fields: Annotated[dict[str, Any], msgspec.Meta(description="Field values by API name")]


class UpdateRecordParams(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Params of ``update_record``."""

    sobject: Annotated[str, msgspec.Meta(pattern=_SOBJECT, description="sObject API name")]
    id: Annotated[str, msgspec.Meta(pattern=_RECORD_ID, description="The record's Id")]
    fields: Annotated[dict[str, Any], msgspec.Meta(description="Field values by API name")]


DESCRIPTORS = (
    ActionDescriptor("create_record", "Create a Salesforce record", CreateRecordParams),
    ActionDescriptor("update_record", "Update fields of a Salesforce record", UpdateRecordParams),
)


def _limit_exceeded(response: requests.Response) -> bool:
    return re.search(r"REQUEST_LIMIT_EXCEEDED", response.text) is not None


class SalesforceActions:
    """An :class:`~lakesync_platform.core.actions.ActionHandler` on one Salesforce org."""

    def __init__(
        self,
        options: SalesforceOptions,
        secrets: SalesforceSecrets,
        settings: HttpSettings | None = None,
    ) -> None:
        chosen = settings or HttpSettings(timeout_s=10.0, tries=3)
        self.options = options
        self.auth = SalesforceAuth(options, secrets)
        self._settings = chosen
        self._session: SourceSession | None = None

    @property
    def session(self) -> SourceSession:
        """The session, logged in on first use (a gateway starts without calling Salesforce)."""
        if self._session is None:
            retry = write_retry(self._settings)
            self._session = SourceSession(self._settings, self.auth, retry=retry)
        return self._session

    @property
    def descriptors(self) -> Sequence[ActionDescriptor]:
        """``create_record`` and ``update_record``."""
        return DESCRIPTORS

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        """Create or update the record; the result names it."""
        try:
            session = self.session
        except AdapterError as exc:  # the login failed: retry unless Salesforce refused it
            raise ActionError(exc.message, retryable=not isinstance(exc, LoginRefused)) from exc
        base = self.auth.instance_url + data_path(self.options.api_version, "sobjects")
        if action.action_type == "create_record":
            p = msgspec.convert(action.params, CreateRecordParams)
            doc = send_action(
                session, "POST", f"{base}/{p.sobject}", SOURCE, p.fields, retryable=_limit_exceeded
            )
            return {"id": doc.get("id"), "sobject": p.sobject, "created": bool(doc.get("success"))}
        u = msgspec.convert(action.params, UpdateRecordParams)
        send_action(
            session, "PATCH", f"{base}/{u.sobject}/{u.id}", SOURCE, u.fields,
            retryable=_limit_exceeded,
        )  # fmt: skip
        return {"id": u.id, "sobject": u.sobject, "updated": True}

    def close(self) -> None:
        """Release the HTTP connections."""
        if self._session is not None:
            self._session.close()
