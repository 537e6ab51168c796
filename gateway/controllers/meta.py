"""Meta routes: liveness, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency

from ..bodies import Status
from ..openapi import errors, response
from ..state import GatewayServices
from ._json import json_response

__all__ = ["MetaController"]


class MetaController(Controller):
    """Unauthenticated routes about the process itself."""

    path = "/"
    tags = ["meta"]  # noqa: RUF012

    @get(
        "/health",
        sync_to_thread=False,
        responses={200: response(Status, "Alive")},
    )
    def health(self) -> Response[bytes]:
        """Liveness."""
        return json_response(Status("ok"))

    @get(
        "/ready",
        responses={
            200: response(Status, "Ready"),
            503: response(Status, "Not ready: the WAL does not answer, or the process drains"),
        },
    )
    async def ready(self, services: NamedDependency[GatewayServices]) -> Response[bytes]:
        """Readiness: the WAL answers and the process is not draining (after SIGTERM, so that
        a balancer stops sending to it before it stops serving)."""
        if services.drain.draining:
            return json_response(Status("not_ready", "draining"), 503)
        try:
            await services.offload(services.admin.ping)
        except Exception:  # any failure to reach the WAL means not ready; reported, not raised
            return json_response(Status("not_ready", "adapter unreachable"), 503)
        return json_response(Status("ready"))

    @get(
        "/metrics",
        responses={
            200: response(str, "Prometheus text", "text/plain"),
            **errors(503, 504),
        },
    )
    async def prometheus(self, services: NamedDependency[GatewayServices]) -> Response[str]:
        """Prometheus text exposition."""
        backlogs = await services.offload(services.admin.backlogs)
        return Response(services.metrics.render(backlogs), media_type="text/plain; version=0.0.4")

    @get("/v1/openapi.json", sync_to_thread=False, include_in_schema=False)
    def openapi(self, request: Request[Any, Any, Any]) -> dict[str, Any]:
        """The OpenAPI document Litestar generates from the controllers."""
        return request.app.openapi_schema.to_schema()
