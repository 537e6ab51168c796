"""The gateway's OpenAPI document: Litestar generates it from the controllers.

This module holds what the controllers share to describe themselves — the gateway id path
parameter, the pull's query parameters, the request bodies the handlers decode themselves, the
error responses of each route — and the config: the document is served at ``/v1/openapi.json``
(by the meta controller) and Litestar's Swagger UI at ``/v1/docs``.

The sync and admin handlers read their raw bodies and query strings themselves: the core codecs
decode them (their speed, and their error messages, which are the protocol's), and a repeated
query parameter counts by its first value, as in the reference. Litestar documents a request
body only for a ``data`` parameter and query parameters only for handler parameters, and would
then parse them itself; so :func:`request_body` declares the body on a dependency no handler asks
for (schema generation reads it, no request resolves it), and :func:`query_parameters` adds the
pull's query parameters to its documented operation (``operation_class``).
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Annotated, Any

from litestar.di import Provide
from litestar.enums import ParamType
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPIType,
    Operation,
    Parameter,
    Schema,
    SecurityRequirement,
    SecurityScheme,
)
from litestar.params import PathParameter
from litestar.types import Method

from lakesync_platform.core.errors import ERRORS_BY_CODE, AuthError, LakeSyncError, SchemaError
from lakesync_platform.core.identifiers import GATEWAY_ID_MAX_LENGTH, GATEWAY_ID_RE
from lakesync_platform.core.wire import MAX_ID_LENGTH

from .bodies import HLC_PATTERN, ErrorBody

__all__ = [
    "BEARER",
    "CHECKPOINT_QUERY",
    "PULL_QUERY",
    "GatewayId",
    "errors",
    "openapi_config",
    "query_parameters",
    "request_body",
    "response",
]

BEARER: list[SecurityRequirement] = [{"bearer": []}]
"""The security requirement of the sync and admin routes: a Bearer JWT."""

GatewayId = Annotated[
    str,
    PathParameter(
        description="The gateway id (checked before the token: 400 if it breaks the rule)",
        schema_extra={
            "pattern": f"^(?:{GATEWAY_ID_RE.pattern})$",
            "min_length": 1,
            "max_length": GATEWAY_ID_MAX_LENGTH,
        },
    ),
]
"""The ``{gw}`` path parameter (``lakesync_platform.core.identifiers``; the guards check it)."""


def _query(name: str, description: str, schema: Schema, *, required: bool = False) -> Parameter:
    return Parameter(
        name=name,
        param_in=ParamType.QUERY,
        schema=schema,
        description=description,
        required=required,
    )


PULL_QUERY = (
    _query(
        "since",
        "The cursor: deltas after this HLC (protocol v1 also reads it as JavaScript's BigInt():"
        " blank is 0, 0x-prefixed is hex, negative is 0)",
        Schema(type=OpenAPIType.STRING, pattern=HLC_PATTERN),
        required=True,
    ),
    _query(
        "clientId",
        "The pulling client (its token's sub unless the token is an admin's)",
        Schema(type=OpenAPIType.STRING, min_length=1, max_length=MAX_ID_LENGTH),
        required=True,
    ),
    _query(
        "limit",
        "Page size, default 100, clamped to 10000 (read as JavaScript's parseInt(): 10abc is 10)",
        Schema(type=OpenAPIType.INTEGER, minimum=1),
    ),
    _query(
        "format",
        "stamped: one delta per row, every column with its stamp; blank or absent: as the"
        " reference gateway pulls",
        Schema(type=OpenAPIType.STRING, enum=["stamped", ""]),
    ),
    _query(
        "source",
        "A declared source to pull from (404 SOURCE_NOT_FOUND for an unknown one); its cursors"
        " (serverHlc, then since) are wider than an HLC: up to 2^128 + 2^118 - 1",
        Schema(type=OpenAPIType.STRING),
    ),
)
"""The pull's query parameters (PROTOCOL.md §4.3), as the pull handler reads them."""

CHECKPOINT_QUERY = (
    _query(
        "format",
        "stamped: rows with per-column stamps (lakesync.platform.v1.StampedSyncResponse"
        " frames); blank or absent: the reference's SyncResponse frames, as the TS client reads"
        " them",
        Schema(type=OpenAPIType.STRING, enum=["stamped", ""]),
    ),
    _query(
        "clientId",
        "The client being bootstrapped (default: the token's sub; an admin may name another)",
        Schema(type=OpenAPIType.STRING, min_length=1, max_length=MAX_ID_LENGTH),
    ),
)
"""The checkpoint's query parameters (neither is sent by the TS client)."""


def query_parameters(*parameters: Parameter) -> type[Operation]:
    """``operation_class=`` that adds the query ``parameters`` (read by the handler itself) to
    the route's documented operation."""

    @dataclass
    class WithQuery(Operation):
        def __post_init__(self) -> None:
            self.parameters = [*(self.parameters or []), *parameters]

    return WithQuery


def request_body(struct: type[Any]) -> dict[str, Provide]:
    """``dependencies=`` that document ``struct`` as the route's JSON request body (see the
    module docstring: the dependency is never resolved; the handler decodes the raw body)."""

    def documented_body(data: Any) -> Any:
        raise AssertionError("documentation only")  # pragma: no cover

    documented_body.__annotations__ = {"data": struct, "return": struct}
    return {"documented_body": Provide(documented_body, sync_to_thread=False)}


def response(
    body: type[Any] | None, description: str, media_type: str = "application/json"
) -> ResponseSpec:
    """A ``responses=`` entry: ``body`` (``None``: no body) as this status's answer."""
    return ResponseSpec(
        body, description=description, media_type=media_type, generate_examples=False
    )


def _codes(status: int) -> list[str]:
    """The error codes answered with ``status``: the registry's, plus the instances that carry
    another status (an auth failure on the wrong gateway or role, a bad schema on an admin
    route, a body over the limit, a timeout)."""
    codes = [code for code, cls in ERRORS_BY_CODE.items() if cls.http_status == status]
    extra = {
        403: AuthError.code,
        400: SchemaError.code,
        409: "VALIDATION_ERROR",
        413: "VALIDATION_ERROR",
        504: LakeSyncError.code,
    }.get(status)
    return [*codes, extra] if extra and extra not in codes else codes


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """``responses=`` entries: each status with the error envelope and the codes it carries."""
    return {
        status: response(ErrorBody, f"{HTTPStatus(status).phrase} ({', '.join(_codes(status))})")
        for status in statuses
    }


def _operation_id(handler: HTTPRouteHandler, method: Method, components: list[Any]) -> str:
    """Operation ids are the handler names (``push``, ``pull``, ``save_schema``, …)."""
    return handler.handler_name


def openapi_config() -> OpenAPIConfig:
    """Litestar's OpenAPI config: the document's info and security scheme, the Swagger UI at
    ``/v1/docs`` (which reads its copy of the document at ``/v1/docs/openapi.json``)."""
    bearer = SecurityScheme(type="http", scheme="bearer", bearer_format="JWT")
    return OpenAPIConfig(
        title="LakeSync Platform gateway",
        version="1.0.0",
        description="LakeSync protocol v1: push and pull column-level deltas; admin routes.",
        components=Components(security_schemes={"bearer": bearer}),
        use_handler_docstrings=True,
        operation_id_creator=_operation_id,
        path="/v1/docs",
        render_plugins=[SwaggerRenderPlugin(path="/")],
    )
