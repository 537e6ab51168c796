"""The action routes: run actions, and discover them (PROTOCOL.md §8)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency

from lakesync_platform.core.actions import decode_action_push
from lakesync_platform.core.errors import ForbiddenError

from ..auth import Identity, client_guard
from ..bodies import ActionDiscoveryBody, ActionRequest, ActionResponseBody
from ..openapi import BEARER, GatewayId, errors, request_body, response
from ..state import GatewayServices
from ._json import json_response

__all__ = ["ActionController"]


class ActionController(Controller):
    """``/v1/sync/{gw}/action`` and ``/actions``: a client token for ``gw``."""

    path = "/v1/sync/{gw:str}"
    guards = [client_guard]  # noqa: RUF012  # Litestar reads these class attributes
    security = BEARER
    tags = ["actions"]  # noqa: RUF012

    @post(
        "/action",
        status_code=200,
        dependencies=request_body(ActionRequest),
        responses={
            200: response(ActionResponseBody, "One result per action, in request order"),
            **errors(400, 401, 403, 413, 429, 503, 504),
        },
    )
    async def action(
        self,
        request: Request[Identity, Any, Any],
        gw: GatewayId,
        services: NamedDependency[GatewayServices],
    ) -> Response[bytes]:
        """Run actions on the gateway's connectors; each runs once, whatever the retries."""
        identity = request.user
        push = decode_action_push(await request.body())
        if (
            identity.client_id is not None
            and push.client_id != identity.client_id
            and not identity.is_admin
        ):
            raise ForbiddenError(
                "Client ID mismatch: action clientId does not match authenticated identity"
            )
        actions = services.actions
        results = await services.offload(
            actions.dispatch, gw, push.client_id, push.actions, claims=identity.claims
        )
        return json_response(
            {"results": [r.to_json() for r in results], "serverHlc": str(actions.server_hlc())}
        )

    @get(
        "/actions",
        sync_to_thread=False,
        responses={
            200: response(ActionDiscoveryBody, "The connectors and their action types"),
            **errors(400, 401, 403, 429),
        },
    )
    def describe_actions(
        self, gw: GatewayId, services: NamedDependency[GatewayServices]
    ) -> Response[bytes]:
        """The gateway's connectors and the action types each supports, with params schemas."""
        return json_response(services.actions.describe(gw))
