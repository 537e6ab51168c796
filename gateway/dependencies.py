"""The one dependency route handlers receive: ``services`` (Litestar dependency injection).

One provider on purpose: Litestar resolves several dependencies of a handler concurrently in a
task group, a trip through the event loop on every request; one dependency is resolved inline.
The provider takes no parameters, so resolving it parses nothing: it hands out the services the
app built at startup from a :class:`ServicesSlot` filled then.
"""

from __future__ import annotations

from typing import Any

from litestar.di import Provide

from .state import GatewayServices

__all__ = ["ServicesSlot", "services_dependency"]


class ServicesSlot:
    """Holds the app's services from startup to shutdown."""

    services: GatewayServices | None = None

    def get(self) -> GatewayServices:
        """The services (only asked for while the app serves requests)."""
        assert self.services is not None, "the app has not started"
        return self.services


def services_dependency(slot: ServicesSlot) -> dict[str, Any]:
    """The app-level ``dependencies`` mapping: ``services`` from ``slot``."""

    def provide_services() -> GatewayServices:
        return slot.get()

    return {"services": Provide(provide_services, sync_to_thread=False)}
