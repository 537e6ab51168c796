"""The admin routes: schemas, sync rules, a gateway's metrics, flush requests."""

from __future__ import annotations

import os
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.status_codes import HTTP_202_ACCEPTED

from lakesync_platform.core.errors import SchemaError
from lakesync_platform.core.schema import parse_table_schema, table_schema_to_json
from lakesync_platform.core.sync_rules import parse_sync_rules, sync_rules_to_json
from lakesync_platform.core.wire import decode_json

from ..auth import admin_guard
from ..bodies import (
    FlushAccepted,
    FlushRequestView,
    GatewayMetricsBody,
    Saved,
    SavedSchema,
    SchemaList,
    SyncRulesBody,
    TableSchemaBody,
)
from ..openapi import BEARER, GatewayId, errors, request_body, response
from ..state import GatewayServices
from ._json import json_response

__all__ = ["AdminController"]

Services = NamedDependency[GatewayServices]
_READ_ERRORS = errors(400, 401, 403, 429, 503, 504)
_WRITE_ERRORS = errors(400, 401, 403, 413, 429, 503, 504)


class AdminController(Controller):
    """``/v1/admin/…/{gw}``: every route needs an admin token for ``gw``."""

    path = "/v1/admin"
    guards = [admin_guard]  # noqa: RUF012  # Litestar reads these class attributes
    security = BEARER
    tags = ["admin"]  # noqa: RUF012

    @post(
        "/schema/{gw:str}",
        status_code=200,
        dependencies=request_body(TableSchemaBody),
        responses={200: response(SavedSchema, "Saved"), **_WRITE_ERRORS},
    )
    async def save_schema(
        self, request: Request[Any, Any, Any], gw: GatewayId, services: Services
    ) -> Response[bytes]:
        """Register a table schema, or evolve it additively."""
        body = decode_json(await request.body())
        try:
            schema = parse_table_schema(body)
            stored = await services.offload(services.sync.save_schema, gw, schema)
        except SchemaError as exc:
            exc.http_status = 400  # on an admin route a bad schema is a bad request
            raise
        version = await services.offload(services.admin.schema_version, gw, stored.table)
        return json_response(SavedSchema(True, stored.table, version))

    @get(
        "/schema/{gw:str}",
        responses={200: response(SchemaList, "The schemas"), **_READ_ERRORS},
    )
    async def list_schemas(self, gw: GatewayId, services: Services) -> Response[bytes]:
        """Every registered schema with its version."""
        schemas = await services.offload(services.admin.schemas, gw)
        return json_response(
            SchemaList([{**table_schema_to_json(s.schema), "version": s.version} for s in schemas])
        )

    @post(
        "/sync-rules/{gw:str}",
        status_code=200,
        dependencies=request_body(SyncRulesBody),
        responses={200: response(Saved, "Saved"), **_WRITE_ERRORS},
    )
    async def save_sync_rules(
        self, request: Request[Any, Any, Any], gw: GatewayId, services: Services
    ) -> Response[bytes]:
        """Replace the gateway's sync rules."""
        rules = parse_sync_rules(decode_json(await request.body()))
        await services.offload(services.sync.save_sync_rules, gw, rules)
        return json_response(Saved(True))

    @get(
        "/sync-rules/{gw:str}",
        responses={
            200: response(SyncRulesBody, "The sync rules"),
            **_READ_ERRORS,
            **errors(404),
        },
    )
    async def get_sync_rules(self, gw: GatewayId, services: Services) -> Response[bytes]:
        """The stored sync rules (404 if none were saved)."""
        rules = await services.offload(services.admin.sync_rules, gw)
        return json_response(sync_rules_to_json(rules))

    @get(
        "/metrics/{gw:str}",
        responses={
            200: response(GatewayMetricsBody, "The counters"),
            **_READ_ERRORS,
        },
    )
    async def gateway_metrics(self, gw: GatewayId, services: Services) -> Response[bytes]:
        """Counters for one gateway (reference fields plus WAL positions and flush requests)."""
        status = await services.offload(services.admin.status, gw)
        s = status.stats
        return json_response(
            GatewayMetricsBody(
                log_size=s.backlog_entries,
                index_size=s.row_count,
                byte_size=s.backlog_bytes,
                live_rows=s.live_rows,
                cursor=str(s.max_cursor),
                flush_watermark=str(s.flush_watermark),
                oldest_unflushed_ms=status.oldest_unflushed_ms,
                flush_requests=[
                    FlushRequestView(r.request_id, r.status, r.detail, r.requested_ms, r.updated_ms)
                    for r in status.flush_requests
                ],
                process=_process_stats(),
            )
        )

    @post(
        "/flush/{gw:str}",
        status_code=HTTP_202_ACCEPTED,
        responses={
            HTTP_202_ACCEPTED: response(FlushAccepted, "Queued"),
            **_READ_ERRORS,
        },
    )
    async def request_flush(self, gw: GatewayId, services: Services) -> Response[bytes]:
        """Queue a flush for the pipeline; its outcome shows in the admin metrics route."""
        req = await services.offload(services.admin.request_flush, gw)
        return json_response(FlushAccepted(req.request_id, req.status), HTTP_202_ACCEPTED)


def _process_stats() -> dict[str, int]:
    try:
        with open(f"/proc/{os.getpid()}/statm") as fh:
            pages = fh.read().split()
        return {"rss": int(pages[1]) * os.sysconf("SC_PAGE_SIZE")}
    except (OSError, ValueError, IndexError):
        return {}
