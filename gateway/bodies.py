"""The JSON bodies the routes answer with, as msgspec structs (the wire contract).

Field order is key order on the wire; names are camel-cased as the protocol spells them.
Request bodies are decoded by the core codecs (``decode_push``, ``parse_table_schema``,
``parse_sync_rules``), whose error messages are part of the protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from lakesync_platform.core.wire import WireDelta
from lakesync_platform.sync.delivery import PulledDelta, StampedInsert

__all__ = [
    "FlushAccepted",
    "FlushRequestView",
    "GatewayMetricsBody",
    "PullResponse",
    "PushResponse",
    "Saved",
    "SavedSchema",
    "SchemaList",
    "Status",
]


class Status(msgspec.Struct, omit_defaults=True):
    """``/health`` and ``/ready``: ``{"status"}``, with a ``reason`` when not ready."""

    status: str
    reason: str | None = None


class PushResponse(msgspec.Struct, rename="camel"):
    """A push's answer: the cursor to resume from, deltas accepted, and what was appended."""

    server_hlc: str
    accepted: int
    deltas: list[WireDelta]


class PullResponse(msgspec.Struct, rename="camel"):
    """One pull page."""

    deltas: Sequence[PulledDelta | StampedInsert]
    server_hlc: str
    has_more: bool


class Saved(msgspec.Struct):
    """A config write succeeded."""

    saved: bool


class SavedSchema(msgspec.Struct):
    """A schema was registered or evolved to ``version``."""

    saved: bool
    table: str
    version: int


class SchemaList(msgspec.Struct):
    """Every registered schema (its JSON form plus ``version``)."""

    schemas: list[dict[str, Any]]


class FlushAccepted(msgspec.Struct, rename="camel"):
    """A queued flush request."""

    request_id: str
    status: str


class FlushRequestView(msgspec.Struct, rename="camel"):
    """A flush request as the admin metrics list it."""

    request_id: str
    status: str
    detail: str | None
    requested_ms: int
    updated_ms: int


class GatewayMetricsBody(msgspec.Struct, rename="camel"):
    """Counters of one gateway (the reference's fields plus WAL positions and flush requests)."""

    log_size: int
    index_size: int
    byte_size: int
    live_rows: int
    cursor: str
    flush_watermark: str
    oldest_unflushed_ms: int | None
    flush_requests: list[FlushRequestView]
    process: dict[str, int]
