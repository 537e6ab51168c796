"""The one dependency route handlers receive: ``services`` (Litestar dependency injection).

A single provider on purpose: Litestar resolves several dependencies of one handler
concurrently in a task group, which costs every request a trip through the event loop; one
dependency is resolved inline.
"""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State
from litestar.di import Provide

from .state import GatewayServices, GatewayState

__all__ = ["DEPENDENCIES", "provide_services"]


def provide_services(state: State) -> GatewayServices:
    """The services the app built at startup."""
    gateway: GatewayState = state.gateway
    return gateway.services


DEPENDENCIES: dict[str, Any] = {"services": Provide(provide_services, sync_to_thread=False)}
"""App-level dependencies (a handler receives those it names)."""
