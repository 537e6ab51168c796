"""HTTP routes: thin controllers over :class:`lakesync_platform.sync.service.SyncService`."""

from __future__ import annotations

import os
import time
from typing import Any

from litestar import Request, Response, get, post
from litestar.params import FromPath
from litestar.status_codes import HTTP_202_ACCEPTED

from lakesync_platform.core.errors import (
    ForbiddenError,
    NotFoundError,
    SchemaError,
    ValidationError,
)
from lakesync_platform.core.schema import parse_table_schema, table_schema_to_json
from lakesync_platform.core.sync_rules import parse_sync_rules, sync_rules_to_json
from lakesync_platform.core.wire import (
    decode_json,
    decode_push,
    deltas_to_wire,
    encode_json,
    parse_pull_limit,
    parse_since,
)

from .auth import Identity, authenticate, check_gateway_id
from .openapi import openapi_document
from .state import gateway_state, run_blocking

__all__ = ["ROUTES"]

_JSON = "application/json"
_MAX_CLIENT_ID = 1024


def _json(body: Any, status: int = 200) -> Response[bytes]:
    return Response(encode_json(body), status_code=status, media_type=_JSON)


def identify(request: Request[Any, Any, Any], gw: str, *, admin: bool = False) -> Identity:
    """Authenticate the caller for ``gw`` and apply the optional rate limit."""
    state = gateway_state(request)
    ident = authenticate(request, gw, state.settings, admin=admin)
    state.rate_limit(request, ident.client_id)
    return ident


# ---------------------------------------------------------------------- meta


@get("/health", sync_to_thread=False)
def health() -> dict[str, str]:
    """Liveness."""
    return {"status": "ok"}


@get("/ready")
async def ready(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Readiness: the WAL answers."""
    state = gateway_state(request)
    try:
        await run_blocking(state, state.wal.ping)
    except Exception:  # any failure to reach the WAL means not ready; reported, not raised
        return _json({"status": "not_ready", "reason": "adapter unreachable"}, 503)
    return _json({"status": "ready"})


@get("/metrics")
async def metrics(request: Request[Any, Any, Any]) -> Response[str]:
    """Prometheus text exposition."""
    state = gateway_state(request)

    def backlog() -> dict[str, tuple[int, int]]:
        out = {}
        for gw in state.wal.gateway_ids():
            s = state.wal.stats(gw)
            out[gw] = (s.backlog_entries, s.backlog_bytes)
        return out

    text = state.metrics.render(await run_blocking(state, backlog))
    return Response(text, media_type="text/plain; version=0.0.4")


@get("/v1/openapi.json", sync_to_thread=False)
def openapi() -> dict[str, Any]:
    """The OpenAPI document."""
    return openapi_document()


# ---------------------------------------------------------------------- sync


@post("/v1/sync/{gw:str}/push", status_code=200)
async def push(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Push a batch of deltas; accepted whole or rejected whole."""
    state = gateway_state(request)
    started = time.perf_counter()
    status = "error"
    try:
        ident = identify(request, gw)
        body = decode_push(await request.body())
        if ident.client_id is not None and body.client_id != ident.client_id and not ident.is_admin:
            raise ForbiddenError(
                "Client ID mismatch: push clientId does not match authenticated identity"
            )
        result = await run_blocking(
            state,
            state.service.push,
            gw,
            body.client_id,
            body.deltas,
            claims=ident.claims,
            any_client_ids=ident.is_admin,
        )
        status = "ok"
    finally:
        state.metrics.observe_push(status, (time.perf_counter() - started) * 1000)
    state.metrics.observe_push_counts(result.accepted, len(result.entries), result.duplicates)
    return _json(
        {
            "serverHlc": str(result.server_hlc),
            "accepted": result.accepted,
            "deltas": deltas_to_wire(result.entries),
        }
    )


@get("/v1/sync/{gw:str}/pull")
async def pull(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Pull rows changed after ``since``, filtered by the caller's view."""
    state = gateway_state(request)
    ident = identify(request, gw)
    params = request.query_params
    client_id = params.get("clientId")
    since_raw = params.get("since")
    if not since_raw or not client_id:
        raise ValidationError("Missing required query params: since, clientId")
    since = parse_since(since_raw)
    if len(client_id) > _MAX_CLIENT_ID:
        raise ValidationError(f"clientId is longer than {_MAX_CLIENT_ID} characters")
    limit = parse_pull_limit(params.get("limit"))
    source = params.get("source")
    if source:
        raise NotFoundError(f'Source adapter "{source}" not found')
    if ident.client_id is not None and client_id != ident.client_id and not ident.is_admin:
        raise ForbiddenError(
            "Client ID mismatch: pull clientId does not match authenticated identity"
        )
    fmt = params.get("format")
    if fmt not in (None, "", "stamped"):
        raise ValidationError("Invalid 'format' parameter — must be 'stamped' or absent")
    page = await run_blocking(
        state,
        state.service.pull,
        gw,
        client_id,
        since,
        limit,
        claims=ident.claims,
        stamped=fmt == "stamped",
    )
    state.metrics.observe_pull(len(page.wire))
    return _json({"deltas": page.wire, "serverHlc": str(page.server_hlc), "hasMore": page.has_more})


@get("/v1/sync/{gw:str}/checkpoint")
async def checkpoint(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Initial-sync checkpoints are generated by the pipeline; none exists yet → 404."""
    identify(request, gw)
    raise NotFoundError("No checkpoint available")


# ---------------------------------------------------------------------- admin


@post("/v1/admin/schema/{gw:str}", status_code=200)
async def save_schema(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Register a table schema, or evolve it additively."""
    state = gateway_state(request)
    identify(request, gw, admin=True)
    body = decode_json(await request.body())
    try:
        schema = parse_table_schema(body)
        stored = await run_blocking(state, state.service.save_schema, gw, schema)
    except SchemaError as exc:
        exc.status = 400  # type: ignore[attr-defined]  # admin route: a bad body is a 400
        raise
    versions = await run_blocking(state, state.wal.schema_versions, gw)
    return _json({"saved": True, "table": stored.table, "version": versions.get(stored.table, 1)})


@get("/v1/admin/schema/{gw:str}")
async def list_schemas(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Every registered schema with its version."""
    state = gateway_state(request)
    identify(request, gw, admin=True)
    schemas = await run_blocking(state, state.wal.schemas, gw)
    versions = await run_blocking(state, state.wal.schema_versions, gw)
    return _json(
        {
            "schemas": [
                {**table_schema_to_json(s), "version": versions.get(name, 1)}
                for name, s in sorted(schemas.items())
            ]
        }
    )


@post("/v1/admin/sync-rules/{gw:str}", status_code=200)
async def save_sync_rules(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Replace the gateway's sync rules."""
    state = gateway_state(request)
    identify(request, gw, admin=True)
    rules = parse_sync_rules(decode_json(await request.body()))
    await run_blocking(state, state.service.save_sync_rules, gw, rules)
    return _json({"saved": True})


@get("/v1/admin/sync-rules/{gw:str}")
async def get_sync_rules(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """The stored sync rules."""
    state = gateway_state(request)
    identify(request, gw, admin=True)
    rules = await run_blocking(state, state.wal.sync_rules, gw)
    if rules is None:
        raise NotFoundError("No sync rules saved for this gateway")
    return _json(sync_rules_to_json(rules))


@get("/v1/admin/metrics/{gw:str}")
async def gateway_metrics(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Counters for one gateway (reference fields plus WAL positions and flush requests)."""
    state = gateway_state(request)
    identify(request, gw, admin=True)

    def collect() -> dict[str, Any]:
        s = state.wal.stats(gw)
        requests = state.wal.flush_requests(gw, status=None, limit=20)
        return {
            "logSize": s.backlog_entries,
            "indexSize": s.row_count,
            "byteSize": s.backlog_bytes,
            "liveRows": s.live_rows,
            "cursor": str(s.max_cursor),
            "flushWatermark": str(s.flush_watermark),
            "oldestUnflushedMs": state.wal.oldest_unflushed_ms(gw),
            "flushRequests": [
                {
                    "requestId": r.request_id,
                    "status": r.status,
                    "detail": r.detail,
                    "requestedMs": r.requested_ms,
                    "updatedMs": r.updated_ms,
                }
                for r in requests
            ],
        }

    body = await run_blocking(state, collect)
    body["process"] = _process_stats()
    return _json(body)


@post("/v1/admin/flush/{gw:str}", status_code=HTTP_202_ACCEPTED)
async def request_flush(request: Request[Any, Any, Any], gw: FromPath[str]) -> Response[bytes]:
    """Queue a flush for the pipeline; its outcome shows in the admin metrics route."""
    state = gateway_state(request)
    identify(request, gw, admin=True)
    req = await run_blocking(state, state.wal.request_flush, check_gateway_id(gw), state.clock())
    return _json({"requestId": req.request_id, "status": req.status}, 202)


def _process_stats() -> dict[str, int]:
    try:
        with open(f"/proc/{os.getpid()}/statm") as fh:
            pages = fh.read().split()
        return {"rss": int(pages[1]) * os.sysconf("SC_PAGE_SIZE")}
    except (OSError, ValueError, IndexError):
        return {}


ROUTES = [
    health,
    ready,
    metrics,
    openapi,
    push,
    pull,
    checkpoint,
    save_schema,
    list_schemas,
    save_sync_rules,
    get_sync_rules,
    gateway_metrics,
    request_flush,
]
