"""Responses with a pre-encoded JSON body (the same bytes whatever Litestar's encoder does)."""

from __future__ import annotations

from typing import Any

from litestar import Response

from lakesync_platform.core.wire import encode_json

__all__ = ["json_response"]


def json_response(body: Any, status: int = 200) -> Response[bytes]:
    """``body`` (a struct or plain JSON value) as compact JSON with ``status``."""
    return Response(encode_json(body), status_code=status, media_type="application/json")
