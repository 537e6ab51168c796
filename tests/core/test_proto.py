"""The protobuf codec against the reference byte vectors (PROTOCOL.md §7.1), and the generated
classes against the ``.proto`` they come from."""

from __future__ import annotations

import contextlib
import math
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync_platform.core.actions import Action, ActionErrorResult, ActionResult
from lakesync_platform.core.delta import DELETE, INSERT, UPDATE, ColumnDelta, RowDelta
from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.ids import delta_id
from lakesync_platform.core.proto import (
    TAG_ACTION_PUSH,
    TAG_ACTION_RESPONSE,
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    TAG_SYNC_PUSH,
    CodecError,
    decode_action,
    decode_action_push,
    decode_action_response,
    decode_row_delta,
    decode_sync_pull,
    decode_sync_push,
    decode_sync_response,
    encode_action,
    encode_action_push,
    encode_action_response,
    encode_row_delta,
    encode_sync_pull,
    encode_sync_push,
    encode_sync_response,
    frame,
    unframe,
)

V1_ID = "4fb1e9cd11cfb778f8360db1c2c9aac2cec33380351b0f32f11214a710e2120b"
HLC_V1 = 111411200000000000
V1 = RowDelta(
    INSERT,
    "todos",
    "row-1",
    "client-a",
    (ColumnDelta("title", "Buy milk"), ColumnDelta("done", False), ColumnDelta("priority", 3)),
    HLC_V1,
    V1_ID,
)

# As printed in PROTOCOL.md §7.1: the head of the SyncPush payload up to the first bytes of the
# delta id, and its tail from the last bytes of the delta id.
PUSH_HEAD = bytes.fromhex(
    "0a08636c69656e742d6112980108011205746f646f731a05726f772d3122130a057469746c65120a22427579206d"
    "696c6b22220d0a04646f6e65120566616c7365220d0a087072696f726974791201332900000068e5cf8b013208"
    "636c69656e742d613a40346662"
)
PUSH_TAIL = bytes.fromhex("30621901000068e5cf8b01")


ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "lakesync_platform" / "core" / "_pb"


def test_generated_classes_are_current(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable},
        check=True,
        capture_output=True,
        timeout=60,
    )
    produced = sorted(p.name for p in tmp_path.iterdir())
    assert produced == [
        "lakesync_platform_v1_pb2.py",
        "lakesync_platform_v1_pb2.pyi",
        "lakesync_v1_pb2.py",
        "lakesync_v1_pb2.pyi",
    ]
    for name in produced:
        assert (tmp_path / name).read_bytes() == (GENERATED / name).read_bytes(), (
            f"{name} is stale: run scripts/gen_proto.sh"
        )


def test_tags() -> None:
    assert (TAG_SYNC_PUSH, TAG_SYNC_PULL, TAG_BROADCAST) == (1, 2, 3)
    assert (TAG_ACTION_PUSH, TAG_ACTION_RESPONSE) == (4, 5)


def test_sync_push_vector() -> None:
    payload = encode_sync_push("client-a", [V1], HLC_V1 + 1)
    full = PUSH_HEAD[:-3] + V1_ID.encode() + bytes.fromhex("1901000068e5cf8b01")
    assert payload.startswith(PUSH_HEAD)
    assert payload.endswith(PUSH_TAIL)
    assert payload == full
    assert frame(TAG_SYNC_PUSH, payload) == b"\x01" + payload
    assert decode_sync_push(payload) == ("client-a", [V1], HLC_V1 + 1)
    assert unframe(frame(TAG_SYNC_PUSH, payload)) == (TAG_SYNC_PUSH, payload)


def test_row_delta_is_the_embedded_message() -> None:
    encoded = encode_row_delta(V1)
    assert encoded == PUSH_HEAD[13:-3] + V1_ID.encode()  # after client_id and the 12 98 01 key
    assert len(encoded) == 0x98
    assert decode_row_delta(encoded) == V1


def test_sync_pull_vector() -> None:
    assert encode_sync_pull("client-a", 0, 100) == bytes.fromhex("0a08636c69656e742d611864")
    assert decode_sync_pull(bytes.fromhex("0a08636c69656e742d611864")) == ("client-a", 0, 100)


def test_sync_response_vector() -> None:
    assert encode_sync_response([], HLC_V1 + 2, False) == bytes.fromhex("1102000068e5cf8b01")
    assert decode_sync_response(bytes.fromhex("1102000068e5cf8b01")) == ([], HLC_V1 + 2, False)


def test_broadcast_delete_vector() -> None:
    delete_id = delta_id("client-a", HLC_V1, "todos", "row-1", ())
    delete = RowDelta(DELETE, "todos", "row-1", "client-a", (), HLC_V1, delete_id)
    data = frame(TAG_BROADCAST, encode_sync_response([delete], HLC_V1 + 2, False))
    head = bytes.fromhex(
        "030a6508031205746f646f731a05726f772d312900000068e5cf8b013208636c69656e742d613a40"
    )
    assert data == head + delete_id.encode() + bytes.fromhex("1102000068e5cf8b01")
    tag, payload = unframe(data)
    assert tag == TAG_BROADCAST and decode_sync_response(payload) == ([delete], HLC_V1 + 2, False)


def test_proto3_defaults_are_omitted() -> None:
    assert encode_sync_response([], 0, False) == b""
    assert encode_sync_pull("", 0, 0) == b""
    assert encode_row_delta(RowDelta(INSERT, "", "", "", (), 0, "")) == b"\x08\x01"
    assert encode_sync_response([], 1, True) == bytes.fromhex("1101000000000000001801")
    empty_delta = RowDelta(UPDATE, "", "", "", (), 0, "")
    assert encode_sync_push("", [empty_delta], 0) == b"\x12\x02\x08\x02"  # the message is kept


@pytest.mark.parametrize(
    ("value", "json_bytes"),
    [
        (None, b"null"),
        (1.0, b"1"),
        (1e21, b"1e+21"),
        (-0.0, b"0"),
        ("é😀", '"é😀"'.encode()),
        ("\ud800", b'"\\ud800"'),
        ({"b": 1, "a": [True, None]}, b'{"b":1,"a":[true,null]}'),  # insertion order kept
        ({"b": 1, "1": 2}, b'{"1":2,"b":1}'),  # JavaScript key order
    ],
)
def test_column_values_are_json_stringify(value: Any, json_bytes: bytes) -> None:
    encoded = encode_row_delta(RowDelta(UPDATE, "t", "r", "c", (ColumnDelta("v", value),), 1, "d"))
    column = b"\x0a\x01v\x12" + bytes([len(json_bytes)]) + json_bytes
    assert b"\x22" + bytes([len(column)]) + column in encoded


def test_unknown_fields_are_skipped() -> None:
    unknown = (
        bytes.fromhex("7805")  # field 15, varint
        + bytes.fromhex("81")
        + b"\x01"
        + b"\x00" * 8  # field 16, fixed64
        + bytes.fromhex("8a0103616263")  # field 17, length-delimited "abc"
        + bytes.fromhex("95")
        + b"\x01"
        + b"\x00" * 4  # field 18, fixed32
    )
    column = b"\x0a\x01v\x12\x011" + unknown
    data = b"\x08\x02" + unknown + b"\x22" + bytes([len(column)]) + column + unknown
    assert decode_row_delta(data) == RowDelta(UPDATE, "", "", "", (ColumnDelta("v", 1),), 0, "")
    assert decode_sync_pull(encode_sync_pull("c", 5, 7) + unknown) == ("c", 5, 7)


def test_last_value_of_a_repeated_scalar_wins() -> None:
    assert decode_sync_pull(b"\x18\x01\x18\x02") == ("", 0, 2)


def test_uint32_is_truncated_like_protobuf() -> None:
    assert decode_sync_pull(b"\x18\xff\xff\xff\xff\x1f") == ("", 0, 0xFFFFFFFF)
    assert decode_sync_pull(b"\x18\x80\x80\x80\x80\x10") == ("", 0, 0)  # 2**32 truncated


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b"", "Unknown or unspecified DeltaOp: 0"),
        (b"\x08\x00", "Unknown or unspecified DeltaOp: 0"),
        (b"\x08\x04", "Unknown or unspecified DeltaOp: 4"),
        (b"\x08\x01\x22\x03\x0a\x01v", 'empty value of column "v"'),
        (b"\x08\x01\x22\x05\x0a\x01v\x12\x00", 'empty value of column "v"'),
        (b"\x08\x01\x22\x06\x0a\x01v\x12\x01{", "is not valid JSON"),
        (b"\x08\x01\x22\x08\x0a\x01v\x12\x03NaN", "is not valid JSON"),
        (b"\x08", "truncated varint"),
        (b"\x08\x01\x29\x00\x00", "truncated fixed-width field"),
        (b"\x08\x01\x12\x05abc", "truncated length-delimited field"),
        (b"\x08\x01\x12\x02\xff\xfe", "field 2 is not valid UTF-8"),
        (b"\x08\x01\x28\x01", "wrong wire type for field 5"),  # hlc as a varint
        (b"\x0a\x01\x01", "wrong wire type for field 1"),  # op as bytes
        (b"\x08\x01\x1b", "unsupported wire type 3"),  # groups
        (b"\x00\x01", "invalid field number 0"),
        (b"\x08" + b"\xff" * 10 + b"\x01", "varint longer than 10 bytes"),
        # Accepted by the protobuf runtime (as unknown fields), rejected by the codec:
        (b"\x08\x01\x22\x08\x0a\x01v\x15\x00\x00\x00\x00", "wrong wire type for field 2"),
        (b"\x08\x01\x7b\x7c", "unsupported wire type 3"),  # a well-formed group, field 15
    ],
)
def test_decode_errors(data: bytes, detail: str) -> None:
    with pytest.raises(CodecError) as info:
        decode_row_delta(data)
    assert info.value.message.startswith("Failed to decode RowDelta: ")
    assert detail in info.value.message


def test_deeply_nested_value_is_a_codec_error() -> None:
    value = b"[" * 100_000 + b"]" * 100_000
    column = b"\x0a\x01v\x12" + _varint(len(value)) + value
    data = b"\x08\x01\x22" + _varint(len(column)) + column
    with pytest.raises(CodecError, match="not valid JSON"):
        decode_row_delta(data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_inputs_other_than_bytes() -> None:
    encoded = encode_row_delta(V1)
    assert decode_row_delta(bytearray(encoded)) == V1  # type: ignore[arg-type]
    assert decode_row_delta(memoryview(encoded)) == V1  # type: ignore[arg-type]
    with pytest.raises(CodecError):
        decode_row_delta("not bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("delta", "detail"),
    [
        (RowDelta("UPSERT", "t", "r", "c", (), 1, "d"), "unknown op 'UPSERT'"),
        (RowDelta(INSERT, "t", "r", "c", (), -1, "d"), "fixed64 out of range: -1"),
        (RowDelta(INSERT, "t", "r", "c", (), 2**64, "d"), "fixed64 out of range"),
        (
            RowDelta(INSERT, "t", "r", "c", (ColumnDelta("v", {1, 2}),), 1, "d"),
            "not JSON-serialisable",
        ),
        (RowDelta(INSERT, "t\ud800", "r", "c", (), 1, "d"), "surrogates not allowed"),
    ],
)
def test_encode_errors(delta: RowDelta, detail: str) -> None:
    with pytest.raises(CodecError) as info:
        encode_row_delta(delta)
    assert (
        info.value.message.startswith("Failed to encode RowDelta: ")
        and detail in info.value.message
    )


def test_encode_sync_pull_range() -> None:
    assert encode_sync_pull("c", 2**64 - 1, 2**32 - 1)
    with pytest.raises(CodecError, match="uint32"):
        encode_sync_pull("c", 0, 2**32)


def test_codec_error_is_a_validation_error() -> None:
    assert issubclass(CodecError, ValidationError)
    assert CodecError("x").code == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "Message too short"),
        (b"\x01", "Message too short"),
        (b"\x00\x00", "Unknown message tag: 0x00"),
        (b"\x09\x01", "Unknown message tag: 0x09"),
        (b"\xff\x01", "Unknown message tag: 0xff"),
    ],
)
def test_unframe_errors(data: bytes, message: str) -> None:
    with pytest.raises(CodecError) as info:
        unframe(data)
    assert info.value.message == message


def test_frame() -> None:
    for tag in (TAG_SYNC_PUSH, TAG_SYNC_PULL, TAG_BROADCAST, TAG_ACTION_PUSH, TAG_ACTION_RESPONSE):
        assert unframe(frame(tag, b"\x0a\x00")) == (tag, b"\x0a\x00")
    with pytest.raises(CodecError, match="0x09"):
        frame(9, b"x")


# --- actions ------------------------------------------------------------------------------------

ACTION = Action("a1", "c", 1, "g", "t", {"x": 1})


def test_action_bytes() -> None:
    expected = (
        b"\x0a\x02a1"
        + b"\x12\x01c"
        + b"\x19"
        + struct.pack("<Q", 1)
        + b"\x22\x01g"
        + b"\x2a\x01t"
        + b'\x32\x07{"x":1}'
    )
    assert encode_action(ACTION) == expected
    assert decode_action(expected) == ACTION
    keyed = Action("a1", "c", 1, "g", "t", {"x": 1}, "idem-1")
    assert encode_action(keyed) == expected + b"\x3a\x06idem-1"
    assert decode_action(encode_action(keyed)) == keyed


def test_action_push_round_trip() -> None:
    actions = [
        ACTION,
        Action("a2", "c", 2**64 - 1, "slack", "send", {"text": "héllo", "n": [1, 2]}, "k"),
    ]
    assert decode_action_push(encode_action_push("c", actions)) == ("c", actions)
    assert decode_action_push(b"") == ("", [])


def test_action_response_round_trip() -> None:
    results: list[ActionResult | ActionErrorResult] = [
        ActionResult("a1", {"url": "https://x/1"}, 999),
        ActionErrorResult("a2", "RATE_LIMITED", "Too many requests", True),
        ActionErrorResult("a3", "NOT_FOUND", "gone", False),
    ]
    encoded = encode_action_response(results, 1000)
    assert decode_action_response(encoded) == (results, 1000)


def test_action_decode_errors() -> None:
    with pytest.raises(CodecError, match="empty action params"):
        decode_action(b"\x0a\x02a1")
    with pytest.raises(CodecError, match="action params is not a JSON object"):
        decode_action(b"\x32\x03[1]")
    with pytest.raises(CodecError, match="neither success nor error"):
        decode_action_response(b"\x0a\x00")
    with pytest.raises(CodecError, match="action result data is not a JSON object"):
        decode_action_response(b"\x0a\x06\x0a\x04\x12\x02[]")


def test_action_response_entry_oneof_last_member_wins() -> None:
    success = b"\x0a\x07\x0a\x01a\x12\x02{}"
    error = b"\x12\x05\x0a\x01b\x20\x01"
    entry = success + error
    results, _ = decode_action_response(b"\x0a" + bytes([len(entry)]) + entry)
    assert results == [ActionErrorResult("b", "", "", True)]
    entry = error + success
    results, _ = decode_action_response(b"\x0a" + bytes([len(entry)]) + entry)
    assert results == [ActionResult("a", {}, 0)]


def test_a_message_field_sent_twice_is_merged() -> None:
    hlc_only = b"\x0a\x09\x19" + struct.pack("<Q", 5)
    entry = b"\x0a\x07\x0a\x01a\x12\x02{}" + hlc_only
    results, _ = decode_action_response(b"\x0a" + bytes([len(entry)]) + entry)
    assert results == [ActionResult("a", {}, 5)]


# --- properties ---------------------------------------------------------------------------------

texts = st.text(max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=10,
)
deltas = st.builds(
    RowDelta,
    st.sampled_from([INSERT, UPDATE, DELETE]),
    texts,
    texts,
    texts,
    st.lists(st.builds(ColumnDelta, texts, json_values), max_size=4).map(tuple),
    st.integers(0, 2**64 - 1),
    texts,
)
hlcs = st.integers(0, 2**64 - 1)


def _js(v: Any) -> Any:
    """Compare numbers as JavaScript does (one double type)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, dict):
        return {k: _js(x) for k, x in v.items()}
    return [_js(x) for x in v]


def _same(a: RowDelta, b: RowDelta) -> bool:
    return (a.op, a.table, a.row_id, a.client_id, a.hlc, a.delta_id) == (
        b.op,
        b.table,
        b.row_id,
        b.client_id,
        b.hlc,
        b.delta_id,
    ) and [(c.column, _js(c.value)) for c in a.columns] == [
        (c.column, _js(c.value)) for c in b.columns
    ]


@given(deltas)
def test_row_delta_round_trip(delta: RowDelta) -> None:
    decoded = decode_row_delta(encode_row_delta(delta))
    assert _same(decoded, delta)
    assert encode_row_delta(decoded) == encode_row_delta(delta)  # canonical bytes


@given(texts, st.lists(deltas, max_size=4), hlcs)
def test_sync_push_round_trip(client_id: str, ds: list[RowDelta], hlc: int) -> None:
    got_client, got_deltas, got_hlc = decode_sync_push(encode_sync_push(client_id, ds, hlc))
    assert (got_client, got_hlc) == (client_id, hlc)
    assert len(got_deltas) == len(ds) and all(
        _same(a, b) for a, b in zip(got_deltas, ds, strict=True)
    )


@given(texts, hlcs, st.integers(0, 2**32 - 1))
def test_sync_pull_round_trip(client_id: str, since: int, max_deltas: int) -> None:
    assert decode_sync_pull(encode_sync_pull(client_id, since, max_deltas)) == (
        client_id,
        since,
        max_deltas,
    )


@given(st.lists(deltas, max_size=4), hlcs, st.booleans())
def test_sync_response_round_trip(ds: list[RowDelta], hlc: int, more: bool) -> None:
    got, got_hlc, got_more = decode_sync_response(encode_sync_response(ds, hlc, more))
    assert (got_hlc, got_more) == (hlc, more)
    assert len(got) == len(ds) and all(_same(a, b) for a, b in zip(got, ds, strict=True))


actions = st.builds(
    Action,
    texts,
    texts,
    hlcs,
    texts,
    texts,
    st.dictionaries(
        st.text(max_size=4), st.integers(-(2**53), 2**53) | st.text(max_size=4), max_size=3
    ),
    st.none() | st.text(min_size=1, max_size=6),
)
results_ = st.lists(
    st.builds(
        ActionResult, texts, st.dictionaries(st.text(max_size=4), st.booleans(), max_size=2), hlcs
    )
    | st.builds(ActionErrorResult, texts, texts, texts, st.booleans()),
    max_size=4,
)


@given(texts, st.lists(actions, max_size=3), results_, hlcs)
def test_action_round_trips(
    client_id: str, acts: list[Action], results: list[Any], hlc: int
) -> None:
    assert decode_action_push(encode_action_push(client_id, acts)) == (client_id, acts)
    assert decode_action_response(encode_action_response(results, hlc)) == (results, hlc)


DECODERS = [
    decode_row_delta,
    decode_sync_push,
    decode_sync_pull,
    decode_sync_response,
    decode_action,
    decode_action_push,
    decode_action_response,
]


@given(st.binary(max_size=64), st.sampled_from(DECODERS))
def test_garbage_only_raises_codec_error(data: bytes, decoder: Any) -> None:
    with contextlib.suppress(CodecError):  # anything else fails the test
        decoder(data)


@given(st.lists(deltas, min_size=1, max_size=3), st.data())
def test_truncation_only_raises_codec_error(ds: list[RowDelta], data: st.DataObject) -> None:
    encoded = encode_sync_push("client", ds, 5)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with contextlib.suppress(CodecError):  # anything else fails the test
        decode_sync_push(encoded[:cut])
    flipped = bytearray(encoded)
    flipped[data.draw(st.integers(0, len(encoded) - 1))] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(CodecError):
        decode_sync_push(bytes(flipped))


def test_integers_beyond_2_53_travel_as_javascript_numbers() -> None:
    d = RowDelta(UPDATE, "t", "r", "c", (ColumnDelta("v", 2**53 + 1),), 1, "d")
    assert decode_row_delta(encode_row_delta(d)).columns == (ColumnDelta("v", 2**53),)


def test_non_finite_floats_encode_as_null() -> None:
    d = RowDelta(UPDATE, "t", "r", "c", (ColumnDelta("v", math.inf),), 1, "d")
    assert decode_row_delta(encode_row_delta(d)).columns == (ColumnDelta("v", None),)
