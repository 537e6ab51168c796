"""HttpTransport against recorded-shape gateway answers (httpx.MockTransport, no patching)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from lakesync_platform.client import HttpTransport, TransportError
from lakesync_platform.client._wire import CHECKPOINT_STAMP, RemoteColumn, RemoteRow, read_frames
from lakesync_platform.core.delta import ColumnDelta, RowDelta
from lakesync_platform.core.errors import (
    AuthError,
    BackpressureError,
    ClockDriftError,
    ForbiddenError,
    LakeSyncError,
    RateLimitedError,
    SchemaError,
    ValidationError,
)
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.proto import encode_sync_response
from lakesync_platform.core.stamped import StampedBlock, StampedColumns, encode_stamped_response

Handler = Callable[[httpx.Request], httpx.Response]
COLS = (ColumnDelta("title", "x"),)
DELTA = RowDelta(
    "INSERT", "todos", "r1", "c1", COLS, 7 << 16, delta_id("c1", 7 << 16, "todos", "r1", COLS)
)


def _transport(handler: Handler, **kwargs: object) -> HttpTransport:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return HttpTransport("http://gw.test/", "gw1", client=client, sleep=lambda _: None, **kwargs)  # type: ignore[arg-type]


def test_push_body_and_response() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"serverHlc": "123", "accepted": 1, "deltas": []})

    ack = _transport(handler, token="tok").push("c1", [DELTA], 99)
    assert (ack.server_hlc, ack.accepted) == (123, 1)
    (req,) = seen
    assert req.method == "POST" and str(req.url) == "http://gw.test/v1/sync/gw1/push"
    assert req.headers["Authorization"] == "Bearer tok"
    body = json.loads(req.content)
    assert body == {
        "clientId": "c1",
        "lastSeenHlc": "99",
        "deltas": [
            {
                "op": "INSERT",
                "table": "todos",
                "rowId": "r1",
                "clientId": "c1",
                "columns": [{"column": "title", "value": "x"}],
                "hlc": str(7 << 16),
                "deltaId": DELTA.delta_id,
            }
        ],
    }


def test_pull_asks_for_stamped_pages() -> None:
    row = {
        "op": "DELETE",
        "table": "todos",
        "rowId": "r1",
        "clientId": "c9",
        "columns": [],
        "hlc": "77",
        "deltaId": "d",
    }

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/sync/gw1/pull"
        assert dict(request.url.params) == {
            "since": "42",
            "clientId": "c1",
            "limit": "500",
            "format": "stamped",
        }
        return httpx.Response(200, json={"deltas": [row], "serverHlc": "50", "hasMore": True})

    page = _transport(handler).pull("c1", 42, 500)
    assert page.server_hlc == 50 and page.has_more
    (got,) = page.rows
    assert (got.op, got.row_id, got.hlc, got.client_id, got.full) == (
        "DELETE",
        "r1",
        77,
        "c9",
        False,
    )


def test_malformed_pull_page_is_rejected() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"deltas": [{"op": "DELETE"}], "serverHlc": "5"})

    with pytest.raises(ValidationError, match="missing required field"):
        _transport(handler).pull("c1", 0, 10)


def test_connection_failures_are_retried_with_the_same_bytes() -> None:
    bodies: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        if len(bodies) < 3:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(200, json={"serverHlc": "1", "accepted": 1})

    assert _transport(handler, retries=2).push("c1", [DELTA], 5).accepted == 1
    assert len(bodies) == 3 and len(set(bodies)) == 1  # never re-stamped or re-encoded


def test_retries_pause_twice_as_long_each_time_up_to_a_cap() -> None:
    pauses: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    transport = HttpTransport(
        "http://gw.test", "gw1", client=client, retries=8, sleep=pauses.append
    )
    with pytest.raises(TransportError, match=r"GET http://gw.test/v1/sync/gw1/pull\?.*refused"):
        transport.pull("c1", 0, 10)
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


@pytest.mark.parametrize("status", [429, 503, 500])
def test_answers_are_not_retried_here(status: int) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json={"error": "busy", "code": "RATE_LIMITED"})

    with pytest.raises(LakeSyncError, match="busy"):
        _transport(handler, retries=3).push("c1", [DELTA], 1)
    assert len(seen) == 1  # the outbox retries later, honouring Retry-After


def test_gives_up_after_retries_with_transport_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(TransportError, match="refused"):
        _transport(handler, retries=1).pull("c1", 0, 10)


def test_401_refreshes_the_token_once() -> None:
    tokens = iter(["expired", "fresh", "never"])
    auth: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        auth.append(request.headers["Authorization"])
        if request.headers["Authorization"] == "Bearer expired":
            return httpx.Response(401, json={"error": "JWT has expired", "code": "AUTH_ERROR"})
        return httpx.Response(200, json={"deltas": [], "serverHlc": "1", "hasMore": False})

    t = _transport(handler, get_token=lambda: next(tokens))
    t.pull("c1", 0, 10)
    t.pull("c1", 0, 10)
    assert auth == ["Bearer expired", "Bearer fresh", "Bearer fresh"]


def test_persistent_401_raises_auth_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": "Missing Bearer token", "code": "AUTH_ERROR"})

    with pytest.raises(AuthError, match="Missing Bearer token"):
        _transport(handler, get_token=lambda: "bad").pull("c1", 0, 10)


@pytest.mark.parametrize(
    ("status", "body", "exc"),
    [
        (400, {"error": "Invalid JSON body", "code": "VALIDATION_ERROR"}, ValidationError),
        (403, {"error": "Client ID mismatch", "code": "FORBIDDEN"}, ForbiddenError),
        (409, {"error": "Remote clock is 9000ms ahead", "code": "CLOCK_DRIFT"}, ClockDriftError),
        (422, {"error": "Unknown column", "code": "SCHEMA_ERROR"}, SchemaError),
        (503, {"error": "backlog", "code": "BACKPRESSURE_ERROR"}, BackpressureError),
        (500, {"error": "boom", "code": "INTERNAL_ERROR"}, TransportError),
        (502, None, TransportError),
    ],
)
def test_error_envelopes_map_to_exceptions(status: int, body: object, exc: type[Exception]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(status, text="<html>bad gateway</html>")
        return httpx.Response(status, json={**body, "requestId": "rq-1"})  # type: ignore[dict-item]

    with pytest.raises(exc) as info:
        _transport(handler).push("c1", [DELTA], 1)
    if body is not None:
        assert "rq-1" in str(info.value)


def test_rate_limit_carries_retry_after() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429,
            json={"error": "Too many requests", "code": "RATE_LIMITED"},
            headers={"Retry-After": "17"},
        )

    with pytest.raises(RateLimitedError) as info:
        _transport(handler).push("c1", [DELTA], 1)
    assert info.value.retry_after == 17


def test_invalid_json_is_a_transport_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="not json")

    with pytest.raises(TransportError, match="invalid pull page"):
        _transport(handler).pull("c1", 0, 1)


def test_checkpoint_404_means_none() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Accept"] == "application/x-lakesync-checkpoint-stream"
        assert request.url.params["format"] == "stamped"
        assert request.url.params["clientId"] == "c1"
        return httpx.Response(404, json={"error": "No checkpoint available"})

    assert _transport(handler).checkpoint("c1") is None


def test_checkpoint_empty_stream_uses_the_header_cursor() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"", headers={"X-Checkpoint-Hlc": "777"})

    cp = _transport(handler).checkpoint()
    assert cp is not None and cp.snapshot_hlc == 777 and list(cp.batches) == []


def test_read_frames_splits_across_chunks() -> None:
    frames = [b"abc", b"", b"x" * 300]
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    chunks = [stream[i : i + 5] for i in range(0, len(stream), 5)]
    assert list(read_frames(chunks)) == frames
    with pytest.raises(TransportError, match="inside a frame"):
        list(read_frames([stream[:-1]]))


def test_checkpoint_stream_frames_are_decoded() -> None:
    """Stamped frames give their blocks; a frame in the reference's format (no stamps) gives
    partial rows with the minimal checkpoint stamp."""
    block = StampedBlock(
        "todos",
        ["r2", "r3"],
        [9 << 16, 10 << 16],
        ["c2", "c3"],
        [3 << 16, 0],
        ["c3", ""],
        [4, 5],
        [StampedColumns("title", ["y", None], [8 << 16, 0], ["c2", ""])],
    )
    stream = b"".join(
        len(p).to_bytes(4, "big") + p
        for p in (encode_sync_response([DELTA], 500, False), encode_stamped_response([block], 500))
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream, headers={"X-Checkpoint-Hlc": "500"})

    cp = _transport(handler).checkpoint()
    assert cp is not None and cp.snapshot_hlc == 500
    assert list(cp.batches) == [
        [
            RemoteRow(
                "INSERT",
                "todos",
                "r1",
                DELTA.hlc,
                "c1",
                (RemoteColumn("title", "x", CHECKPOINT_STAMP, ""),),
            )
        ],
        block,
    ]


def test_corrupt_checkpoint_frame_is_a_codec_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"\x00\x00\x00\x02\xff\xff")

    cp = _transport(handler).checkpoint()
    assert cp is not None
    with pytest.raises(ValidationError):
        list(cp.batches)
