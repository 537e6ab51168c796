"""The connector admin routes: register, list (secrets masked) and unregister."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import PathParameter

from lakesync_platform.core.connectors import (
    POLLED_TYPES,
    masked_connector_json,
    parse_connector_config,
)
from lakesync_platform.core.wire import decode_json

from ..auth import admin_guard
from ..bodies import ConnectorBody, ConnectorRegistered, ConnectorUnregistered, ConnectorView
from ..openapi import BEARER, GatewayId, errors, request_body, response
from ..state import GatewayServices
from ._json import json_response

__all__ = ["ConnectorsController"]

Services = NamedDependency[GatewayServices]
ConnectorName = Annotated[str, PathParameter(description="The connector's name")]


class ConnectorsController(Controller):
    """``/v1/admin/connectors/{gw}``: every route needs an admin token for ``gw``."""

    path = "/v1/admin/connectors"
    guards = [admin_guard]  # noqa: RUF012  # Litestar reads these class attributes
    security = BEARER
    tags = ["admin"]  # noqa: RUF012

    @post(
        "/{gw:str}",
        status_code=200,
        dependencies=request_body(ConnectorBody),
        responses={
            200: response(ConnectorRegistered, "Registered"),
            **errors(400, 401, 403, 409, 413, 429, 503, 504),
        },
    )
    async def register_connector(
        self, request: Request[Any, Any, Any], gw: GatewayId, services: Services
    ) -> Response[bytes]:
        """Register a connector; it is polled on its schedule from the pipeline's next tick."""
        cfg = parse_connector_config(decode_json(await request.body()))
        await services.offload(services.admin.register_connector, gw, cfg)
        return json_response(ConnectorRegistered(True, cfg.name))

    @get(
        "/{gw:str}",
        responses={
            200: response(list[ConnectorView], "The connectors"),
            **errors(400, 401, 403, 429, 503, 504),
        },
    )
    async def list_connectors(self, gw: GatewayId, services: Services) -> Response[bytes]:
        """Every registered connector, its secrets masked."""
        found = await services.offload(services.admin.connectors, gw)
        return json_response(
            [
                ConnectorView(
                    c.name,
                    c.type,
                    c.ingest is not None,
                    c.type in POLLED_TYPES,
                    c.schedule,
                    masked_connector_json(c),
                )
                for c in found
            ]
        )

    @delete(
        "/{gw:str}/{name:str}",
        status_code=200,
        responses={
            200: response(ConnectorUnregistered, "Unregistered"),
            **errors(400, 401, 403, 404, 429, 503, 504),
        },
    )
    async def unregister_connector(
        self, gw: GatewayId, name: ConnectorName, services: Services
    ) -> Response[bytes]:
        """Unregister a connector; its cursors are forgotten and it is no longer polled."""
        await services.offload(services.admin.unregister_connector, gw, name)
        return json_response(ConnectorUnregistered(True, name))
