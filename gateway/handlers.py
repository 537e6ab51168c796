"""The action handlers the gateway serves, built from the declarations at startup.

Each connector declared under ``actions:`` (``lakesync_platform.declarations``) becomes a handler
in the :class:`~lakesync_platform.sync.actions.ActionRegistry`: a ``webhook`` connector a
:class:`~lakesync_platform.connectors.webhook.WebhookHandler`, a ``sql`` connector a
:class:`~lakesync_platform.adapters.actions.SqlActionHandler` on its URL or on its declared
destination's. ``${VAR}`` in URLs and headers is read from the settings' ``env``. Registered
Jira and Salesforce source connectors serve their actions through
:class:`~lakesync_platform.connectors.actions.ConnectorActionHandlers`, read from the config
store as they come and go.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lakesync_platform.adapters.actions import SqlActionHandler
from lakesync_platform.connectors.actions import ConnectorActionHandlers
from lakesync_platform.connectors.webhook import WebhookHandler
from lakesync_platform.core.actions import ActionHandler
from lakesync_platform.core.connectors import ConnectorConfig
from lakesync_platform.declarations import (
    ActionConnectorDecl,
    DeclarationError,
    GatewayDecl,
    expand_env,
    load_declarations,
)
from lakesync_platform.settings import GatewaySettings
from lakesync_platform.sync.actions import ActionRegistry

__all__ = ["ActionHandlers", "build_action_handlers"]


class ActionHandlers:
    """The registry of the declared handlers, and how to release them."""

    def __init__(self, provider: ConnectorActionHandlers | None = None) -> None:
        self.registry = ActionRegistry(provider)
        self._closers: list[Callable[[], None]] = [] if provider is None else [provider.close]

    def add(self, gw: str, name: str, handler: ActionHandler, close: Callable[[], None]) -> None:
        """Register ``handler`` for ``gw``'s connector ``name``."""
        self.registry.register(gw, name, handler)
        self._closers.append(close)

    def close(self) -> None:
        """Release every handler's connections."""
        for close in self._closers:
            close()


def _handler(
    gateway: GatewayDecl, decl: ActionConnectorDecl, env: Mapping[str, str]
) -> WebhookHandler | SqlActionHandler:
    descriptors = [t.descriptor(decl.connector) for t in decl.types.values()]
    if decl.kind == "webhook":
        assert decl.url is not None
        return WebhookHandler(
            expand_env(decl.url, env),
            descriptors,
            headers={k: expand_env(v, env) for k, v in decl.headers.items()},
            timeout_s=decl.timeout_s,
            retries=decl.retries,
        )
    url = decl.url if decl.destination is None else gateway.destinations[decl.destination].url
    assert url is not None
    statements = [
        (d, t.statement or "") for d, t in zip(descriptors, decl.types.values(), strict=True)
    ]
    try:
        return SqlActionHandler(expand_env(url, env), statements, name=decl.connector)
    except ValueError as exc:
        raise DeclarationError(str(exc)) from exc


def build_action_handlers(
    settings: GatewaySettings,
    connectors: Callable[[str], Mapping[str, ConnectorConfig]] | None = None,
) -> ActionHandlers:
    """The handlers of every connector declared in ``settings.defs_dir``, and (given the
    config store's ``connectors``) those of every registered Jira or Salesforce connector."""
    provider = None
    if connectors is not None:
        provider = ConnectorActionHandlers(connectors, settings.env)
    handlers = ActionHandlers(provider)
    declarations = load_declarations(settings.defs_dir)
    try:
        for gw, gateway in declarations.gateways.items():
            for name, decl in gateway.actions.items():
                handler = _handler(gateway, decl, settings.env)
                handlers.add(gw, name, handler, handler.close)
    except BaseException:
        handlers.close()
        raise
    return handlers
