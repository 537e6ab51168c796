"""Salesforce OAuth 2.0: the password, client-credentials and refresh-token flows.

:class:`SalesforceAuth` is the session's re-authenticator: at the start, and again when an API
call answers 401 (an expired or revoked session), it posts the flow's form to the token
endpoint and sets the ``Bearer`` token; the answer's ``instance_url`` is where the API is
called. The token request bypasses the session's own re-authentication (a refused login is
not retried in a loop) and fails with an :class:`~lakesync_platform.core.errors.AdapterError`
that names the flow and Salesforce's reason, never a secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import requests

from ...core.connectors import SalesforceOptions
from ...core.errors import AdapterError
from ..http import error_detail
from .settings import SOURCE

__all__ = ["LoginRefused", "SalesforceAuth", "SalesforceSecrets"]


class LoginRefused(AdapterError):
    """Salesforce answered the token request with a refusal (wrong credentials or client):
    trying again will not help."""


@dataclass(frozen=True, slots=True)
class SalesforceSecrets:
    """The resolved secrets of a connector (from its ``${VAR}`` references)."""

    client_secret: str | None = None
    password: str | None = None
    refresh_token: str | None = None


@dataclass
class SalesforceAuth:
    """Logs in with the configured flow; :attr:`instance_url` is the org's API base."""

    options: SalesforceOptions
    secrets: SalesforceSecrets
    instance_url: str = field(init=False)
    logins: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.instance_url = self.options.instance_url.rstrip("/")

    def form(self) -> dict[str, str]:
        """The token request's form for the configured flow."""
        opts, sec = self.options, self.secrets
        out = {"grant_type": opts.auth_flow, "client_id": opts.client_id}
        if sec.client_secret:
            out["client_secret"] = sec.client_secret
        if opts.auth_flow == "password":
            out["username"] = opts.username or ""
            out["password"] = sec.password or ""
        elif opts.auth_flow == "refresh_token":
            out["refresh_token"] = sec.refresh_token or ""
        return out

    def authenticate(self, session: requests.Session) -> None:
        """Fetch a token and set it on ``session``."""
        try:
            response = requests.Session.request(
                session,
                "POST",
                self.options.token_url,
                data=self.form(),
                timeout=getattr(session, "timeout_s", 30.0),
            )
        except requests.RequestException as exc:
            raise AdapterError(
                f"{SOURCE} login ({self.options.auth_flow} flow) failed: {exc.__class__.__name__}"
            ) from exc
        if response.status_code >= 400:
            raise LoginRefused(
                f"{SOURCE} refused the login ({self.options.auth_flow} flow): "
                f"{error_detail(response)}"
            )
        doc = response.json()
        self.logins += 1
        self.instance_url = str(doc.get("instance_url") or self.instance_url).rstrip("/")
        session.headers["Authorization"] = f"Bearer {doc['access_token']}"
        session.headers["Accept"] = "application/json"
