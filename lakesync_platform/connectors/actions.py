"""The actions of registered source connectors: Jira's and Salesforce's handlers, per gateway.

A Jira or Salesforce connector registered for a gateway (declared in YAML or posted to the
admin route) also serves actions under its name: Jira ``create_issue`` and ``add_comment``
(:mod:`.jira.actions`), Salesforce ``create_record`` and ``update_record``
(:mod:`.salesforce.actions`). :class:`ConnectorActionHandlers` is what the action registry
asks for a gateway's handlers: it reads the gateway's connectors from the config store (at
most once per ``ttl_s``), builds a handler for each with its ``${VAR}`` secrets resolved from
the gateway's environment, keeps it while the connector's config is unchanged, and closes the
handlers of connectors changed or unregistered — so every gateway process serves a connector
registered through any of them, without a restart.

A connector whose secret is not in the gateway's environment still lists its actions, and
answers each with a failure that says which variable is missing (not retryable).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from ..core.actions import Action, ActionContext, ActionDescriptor, ActionHandler
from ..core.connectors import (
    ConnectorConfig,
    connector_config_to_json,
    jira_options,
    resolve_secrets,
    salesforce_options,
)
from ..core.errors import ActionError, ValidationError
from .http import HttpSettings
from .jira import actions as jira_actions
from .salesforce import actions as salesforce_actions
from .salesforce.auth import SalesforceSecrets

__all__ = ["ConnectorActionHandlers", "connector_action_handler"]

log = logging.getLogger(__name__)


class _Unavailable:
    """The actions of a connector that cannot run here (a secret missing from the env)."""

    def __init__(self, descriptors: Sequence[ActionDescriptor], reason: str) -> None:
        self.descriptors = tuple(descriptors)
        self.reason = reason

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        """Refuse, saying why."""
        raise ActionError(self.reason, retryable=False)

    def close(self) -> None:
        """Nothing to release."""


def connector_action_handler(
    cfg: ConnectorConfig, env: Mapping[str, str], settings: HttpSettings | None = None
) -> ActionHandler | None:
    """The action handler of a Jira or Salesforce connector (``None`` for other types)."""

    def secret(value: str | None) -> str | None:
        return None if value is None else resolve_secrets(value, env)

    if cfg.type == "jira":
        jira = jira_options(cfg)
        try:
            base = secret(jira.base_url)
            jira = msgspec.structs.replace(jira, base_url=base)
            return jira_actions.JiraActions(jira, resolve_secrets(jira.api_token, env), settings)
        except ValidationError as exc:
            return _Unavailable(jira_actions.DESCRIPTORS, f"Jira connector: {exc.message}")
    if cfg.type == "salesforce":
        sf = salesforce_options(cfg)
        try:
            sf = msgspec.structs.replace(
                sf,
                instance_url=resolve_secrets(sf.instance_url, env),
                login_url=secret(sf.login_url),
            )
            secrets = SalesforceSecrets(
                secret(sf.client_secret), secret(sf.password), secret(sf.refresh_token)
            )
        except ValidationError as exc:
            return _Unavailable(
                salesforce_actions.DESCRIPTORS, f"Salesforce connector: {exc.message}"
            )
        return salesforce_actions.SalesforceActions(sf, secrets, settings)
    return None


class ConnectorActionHandlers:
    """Handlers of the registered connectors of each gateway (see the module docstring);
    ``connectors`` reads a gateway's registered connectors from the config store."""

    def __init__(
        self,
        connectors: Callable[[str], Mapping[str, ConnectorConfig]],
        env: Mapping[str, str],
        *,
        ttl_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        settings: HttpSettings | None = None,
    ) -> None:
        self._connectors = connectors
        self._env = env
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._settings = settings
        self._lock = threading.Lock()
        self._built: dict[str, dict[str, tuple[bytes, ActionHandler]]] = {}
        self._read_at: dict[str, float] = {}

    def __call__(self, gw: str) -> dict[str, ActionHandler]:
        """``gw``'s connector handlers by connector name."""
        with self._lock:
            now = self._monotonic()
            if now - self._read_at.get(gw, float("-inf")) >= self._ttl_s:
                self._refresh(gw)
                self._read_at[gw] = now
            return {name: handler for name, (_, handler) in self._built.get(gw, {}).items()}

    def _refresh(self, gw: str) -> None:
        try:
            registered = self._connectors(gw)
        except Exception:  # the config store is down: keep serving what was read before
            log.exception("could not read the connectors of gateway %s", gw)
            return
        built = self._built.setdefault(gw, {})
        for name in [n for n in built if n not in registered]:
            _close(built.pop(name)[1])
        for name, cfg in registered.items():
            body = msgspec.json.encode(connector_config_to_json(cfg))
            held = built.get(name)
            if held is not None and held[0] == body:
                continue
            if held is not None:
                _close(built.pop(name)[1])
            handler = connector_action_handler(cfg, self._env, self._settings)
            if handler is not None:
                built[name] = (body, handler)

    def close(self) -> None:
        """Close every handler."""
        with self._lock:
            for handlers in self._built.values():
                for _, handler in handlers.values():
                    _close(handler)
            self._built.clear()
            self._read_at.clear()


def _close(handler: ActionHandler) -> None:
    close = getattr(handler, "close", None)
    if callable(close):
        close()
