"""The sync routes: push, pull and checkpoint (PROTOCOL.md §4.1–§4.3)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.response import Stream

from lakesync_platform.core.checkpoint import CHECKPOINT_MEDIA_TYPE
from lakesync_platform.core.errors import ForbiddenError, NotFoundError, ValidationError
from lakesync_platform.core.hlc import MAX_HLC
from lakesync_platform.core.wire import (
    MAX_ID_LENGTH,
    decode_push,
    deltas_to_wire,
    parse_pull_limit,
    parse_since,
)
from lakesync_platform.sync.source_pull import MAX_SOURCE_CURSOR

from ..auth import COUNTS_PUSH, Identity, client_guard
from ..bodies import PullPageBody, PullResponse, PushRefusal, PushRequest, PushResponse
from ..openapi import (
    BEARER,
    CHECKPOINT_QUERY,
    PULL_QUERY,
    GatewayId,
    errors,
    query_parameters,
    request_body,
    response,
)
from ..state import GatewayServices, Offload
from ._json import json_response

__all__ = ["SyncController"]


class SyncController(Controller):
    """``/v1/sync/{gw}/…``: every route needs a client token for ``gw`` (``request.user``)."""

    path = "/v1/sync/{gw:str}"
    guards = [client_guard]  # noqa: RUF012  # Litestar reads these class attributes
    security = BEARER
    tags = ["sync"]  # noqa: RUF012

    @post(
        "/push",
        status_code=200,
        opt={COUNTS_PUSH: True},
        dependencies=request_body(PushRequest),
        responses={
            200: response(PushResponse, "Accepted; the deltas appended"),
            **errors(400, 401, 403, 409, 413, 422, 429, 503, 504),
        },
    )
    async def push(
        self,
        request: Request[Identity, Any, Any],
        gw: GatewayId,
        services: NamedDependency[GatewayServices],
    ) -> Response[bytes]:
        """Push a batch of deltas; accepted whole or rejected whole — but for the deltas the
        sync rules do not let the caller write, which are refused one by one (``refused``)."""
        identity, metrics = request.user, services.metrics
        started = time.perf_counter()
        status = "error"
        try:
            body = decode_push(await request.body())
            if (
                identity.client_id is not None
                and body.client_id != identity.client_id
                and not identity.is_admin
            ):
                raise ForbiddenError(
                    "Client ID mismatch: push clientId does not match authenticated identity"
                )
            result = await services.offload(
                services.sync.push,
                gw,
                body.client_id,
                body.deltas,
                claims=identity.claims,
                any_client_ids=identity.is_admin,
            )
            status = "ok"
        finally:
            metrics.observe_push(gw, status, time.perf_counter() - started)
        services.realtime.committed(gw, result.head)
        metrics.observe_push_counts(result.accepted, len(result.entries), result.duplicates)
        refused = [
            PushRefusal(
                r.delta.delta_id, r.delta.table, r.delta.row_id, r.error.code, r.error.message
            )
            for r in result.refused
        ]
        return json_response(
            PushResponse(
                str(result.server_hlc), result.accepted, deltas_to_wire(result.entries), refused
            )
        )

    @get(
        "/pull",
        operation_class=query_parameters(*PULL_QUERY),
        responses={
            200: response(PullPageBody, "One page"),
            **errors(400, 401, 403, 404, 429, 503, 504),
        },
    )
    async def pull(
        self,
        request: Request[Identity, Any, Any],
        gw: GatewayId,
        services: NamedDependency[GatewayServices],
    ) -> Response[bytes]:
        """Pull rows changed after ``since``, filtered by the caller's view."""
        identity = request.user
        started = time.perf_counter()
        params = request.query_params
        client_id = params.get("clientId")
        since_raw = params.get("since")
        if not since_raw or not client_id:
            raise ValidationError("Missing required query params: since, clientId")
        source = params.get("source")
        since = parse_since(since_raw, MAX_SOURCE_CURSOR if source else MAX_HLC)
        if len(client_id) > MAX_ID_LENGTH:
            raise ValidationError(f"clientId is longer than {MAX_ID_LENGTH} characters")
        limit = parse_pull_limit(params.get("limit"))
        if (
            identity.client_id is not None
            and client_id != identity.client_id
            and not identity.is_admin
        ):
            raise ForbiddenError(
                "Client ID mismatch: pull clientId does not match authenticated identity"
            )
        fmt = params.get("format")
        if fmt not in (None, "", "stamped"):
            raise ValidationError("Invalid 'format' parameter — must be 'stamped' or absent")
        if source:
            page = await services.offload(
                services.sync.pull_source,
                gw,
                source,
                services.sources.get(gw, source),
                client_id,
                since,
                limit,
                claims=identity.claims,
                stamped=fmt == "stamped",
            )
        else:
            page = await services.offload(
                services.sync.pull,
                gw,
                client_id,
                since,
                limit,
                claims=identity.claims,
                stamped=fmt == "stamped",
            )
        services.metrics.observe_pull(gw, len(page.wire), time.perf_counter() - started)
        return json_response(PullResponse(page.wire, str(page.server_hlc), page.has_more))

    @get(
        "/checkpoint",
        operation_class=query_parameters(*CHECKPOINT_QUERY),
        responses={
            200: response(
                None,
                "The checkpoint: uint32 big-endian length-prefixed protobuf frames; the header"
                " X-Checkpoint-Hlc is the cursor to pull from next (no frames: nothing in view)",
                media_type=CHECKPOINT_MEDIA_TYPE,
            ),
            **errors(400, 401, 403, 404, 429, 503, 504),
        },
    )
    async def checkpoint(
        self,
        request: Request[Identity, Any, Any],
        gw: GatewayId,
        services: NamedDependency[GatewayServices],
    ) -> Response[Any]:
        """Stream the newest initial-sync checkpoint as the caller may see it (404 if none)."""
        identity = request.user
        params = request.query_params
        fmt = params.get("format")
        if fmt not in (None, "", "stamped"):
            raise ValidationError("Invalid 'format' parameter — must be 'stamped' or absent")
        client_id = params.get("clientId") or identity.client_id
        if client_id is not None and len(client_id) > MAX_ID_LENGTH:
            raise ValidationError(f"clientId is longer than {MAX_ID_LENGTH} characters")
        if (
            identity.client_id is not None
            and client_id != identity.client_id
            and not identity.is_admin
        ):
            raise ForbiddenError(
                "Client ID mismatch: checkpoint clientId does not match authenticated identity"
            )
        store = services.checkpoints
        served = None
        if store is not None:
            served = await services.offload(
                services.sync.checkpoint,
                gw,
                client_id,
                store,
                claims=identity.claims,
                stamped=fmt == "stamped",
            )
        if served is None:
            raise NotFoundError("No checkpoint available")
        return Stream(
            _pieces(served.frames, services.offload),
            media_type=CHECKPOINT_MEDIA_TYPE,
            headers={"X-Checkpoint-Hlc": str(served.cursor)},
        )


async def _pieces(frames: Iterator[bytes], offload: Offload) -> AsyncIterator[bytes]:
    """The stream's pieces, each read on a worker thread (storage reads block). A failure ends
    the response unfinished, so the client never takes a cut-short stream for the whole."""
    while (piece := await offload(next, frames, None)) is not None:
        yield piece
