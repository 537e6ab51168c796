"""Bad input (ARCHITECTURE.md §8): every case gets its exact 4xx and error envelope (PROTOCOL.md
§4.2), NOTHING is written, and the server keeps answering."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync_platform.core.auth import sign_token
from lakesync_platform.testing import GatewayProcess
from tests.helpers import SECRET, token, wire

from .conftest import Gateway, assert_error

ID_RULE = "^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"
MISSING_FIELDS = "Missing required fields: clientId, deltas"
MISSING_PARAMS = "Missing required query params: since, clientId"
BAD_SINCE = "Invalid 'since' parameter — must be a decimal integer"
BAD_LIMIT = "Invalid 'limit' parameter — must be a positive integer"
PUSH_MISMATCH = "Client ID mismatch: push clientId does not match authenticated identity"
GW_MISMATCH = "Gateway ID mismatch: JWT authorises a different gateway"
ADMIN_REQUIRED = "Admin role required"
TOO_LARGE = "Payload too large (max 1 MiB)"
MIB = 1_048_576


# ---------------------------------------------------------------------- helpers


@pytest.fixture
def seeded(shared: Gateway, gw: str) -> str:
    """A gateway id that already holds one accepted row (so "unchanged" is meaningful)."""
    resp = shared.push(gw, [shared.delta("seed", {"title": "seed"}, op="INSERT")])
    assert resp.status_code == 200, resp.text
    return gw


def rejected(
    g: Gateway,
    gw: str,
    send: Callable[[], httpx.Response],
    status: int,
    code: str,
    message: str | None = None,
) -> dict[str, Any]:
    """``send()`` is answered with this error, writes nothing, and the server stays up."""
    before = g.snapshot(gw)
    body = assert_error(send(), status, code, message)
    assert g.snapshot(gw) == before, "a rejected request changed the WAL"
    g.health_ok()
    return body


def delta_json(g: Gateway, row_id: str = "bad", **fields: Any) -> dict[str, Any]:
    """A valid wire delta for client ``c1``, with ``fields`` overridden (``...`` removes one)."""
    d = {
        "op": "INSERT",
        "table": "todos",
        "rowId": row_id,
        "clientId": "c1",
        "columns": [{"column": "title", "value": "x"}],
        "hlc": str(g.hlc()),
        "deltaId": "f" * 64,
    }
    d.update(fields)
    return {k: v for k, v in d.items() if v is not ...}


def push_body(g: Gateway, *deltas: dict[str, Any], client_id: str = "c1") -> bytes:
    return json.dumps({"clientId": client_id, "deltas": list(deltas)}).encode()


def b64(obj: Any) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# ---------------------------------------------------------------------- push body corpus

Case = Callable[[Gateway], bytes]


def _d(**fields: Any) -> Case:
    return lambda g: push_body(g, delta_json(g, **fields))


def _raw(data: bytes) -> Case:
    return lambda g: data


def _deep(depth: int) -> Case:
    def make(g: Gateway) -> bytes:
        marker = '"@@"'
        body = push_body(g, delta_json(g, columns=[{"column": "title", "value": "@@"}]))
        return body.replace(marker.encode(), b"[" * depth + b"]" * depth)

    return make


def _bad_utf8(g: Gateway) -> bytes:
    return push_body(g, delta_json(g, rowId="AAAA")).replace(b"AAAA", b"\xff\xfe\x80")


def _too_many(g: Gateway) -> bytes:
    one = json.dumps(delta_json(g, table="t", rowId="r", columns=[], hlc="1", deltaId="d"))
    one = one.replace(" ", "")
    body = '{"clientId":"c1","deltas":[' + ",".join([one] * 10_001) + "]}"
    assert len(body) < MIB  # the count limit must be what trips, not the size limit
    return body.encode()


V = "VALIDATION_ERROR"
PUSH_CASES: list[Any] = [
    # --- not JSON / not a push
    pytest.param(_raw(b'{"clientId":"c1","deltas":['), V, "Invalid JSON body", id="malformed-json"),
    pytest.param(_raw(b""), V, "Invalid JSON body", id="empty-body"),
    pytest.param(_raw(b'{"clientId":"c1","deltas":[]} x'), V, "Invalid JSON body", id="trailing"),
    pytest.param(_raw(b'{"clientId":"c1","deltas":[NaN]}'), V, "Invalid JSON body", id="nan"),
    pytest.param(_raw(b"\xff\xfe{}"), V, "Invalid JSON body", id="binary-garbage"),
    pytest.param(_bad_utf8, V, "Invalid JSON body", id="invalid-utf8-inside-string"),
    pytest.param(_deep(5000), V, None, id="nesting-5000-deep"),
    pytest.param(_raw(b"[]"), V, MISSING_FIELDS, id="json-array"),
    pytest.param(_raw(b'"push"'), V, MISSING_FIELDS, id="json-string"),
    pytest.param(_raw(b"42"), V, MISSING_FIELDS, id="json-number"),
    pytest.param(_raw(b"null"), V, MISSING_FIELDS, id="json-null"),
    pytest.param(_raw(b"{}"), V, MISSING_FIELDS, id="empty-object"),
    pytest.param(_raw(b'{"deltas":[]}'), V, MISSING_FIELDS, id="missing-clientId"),
    pytest.param(_raw(b'{"clientId":"c1"}'), V, MISSING_FIELDS, id="missing-deltas"),
    pytest.param(_raw(b'{"clientId":"c1","deltas":{}}'), V, MISSING_FIELDS, id="deltas-object"),
    pytest.param(_raw(b'{"clientId":"c1","deltas":"x"}'), V, MISSING_FIELDS, id="deltas-string"),
    pytest.param(_raw(b'{"clientId":"c1","deltas":null}'), V, MISSING_FIELDS, id="deltas-null"),
    pytest.param(_raw(b'{"clientId":"","deltas":[]}'), V, MISSING_FIELDS, id="clientId-empty"),
    pytest.param(_raw(b'{"clientId":null,"deltas":[]}'), V, MISSING_FIELDS, id="clientId-null"),
    pytest.param(_raw(b'{"clientId":7,"deltas":[]}'), V, None, id="clientId-number"),
    pytest.param(_too_many, V, "Too many deltas in a single push (max 10,000)", id="10001-deltas"),
    pytest.param(lambda g: push_body(g, 5), V, None, id="delta-not-object"),  # type: ignore[arg-type]
    # --- hlc must be a decimal string in [0, 2^64)
    pytest.param(_d(hlc=123456789), V, None, id="hlc-number"),
    pytest.param(_d(hlc=1.5), V, None, id="hlc-float"),
    pytest.param(_d(hlc=None), V, None, id="hlc-null"),
    pytest.param(_d(hlc=True), V, None, id="hlc-bool"),
    pytest.param(_d(hlc=["1"]), V, None, id="hlc-array"),
    pytest.param(_d(hlc=...), V, None, id="hlc-missing"),
    pytest.param(_d(hlc="-1"), V, None, id="hlc-negative"),
    pytest.param(_d(hlc="0x1f"), V, None, id="hlc-hex"),
    pytest.param(_d(hlc="1e3"), V, None, id="hlc-exponent"),
    pytest.param(_d(hlc="abc"), V, None, id="hlc-abc"),
    pytest.param(_d(hlc=""), V, None, id="hlc-empty"),
    pytest.param(_d(hlc=" 12"), V, None, id="hlc-space"),
    pytest.param(_d(hlc="12.0"), V, None, id="hlc-decimal-point"),
    pytest.param(_d(hlc="18446744073709551616"), V, None, id="hlc-2^64"),
    pytest.param(_d(hlc="9" * 30), V, None, id="hlc-30-digits"),
    # --- op / shape
    pytest.param(_d(op="UPSERT"), V, None, id="op-upsert"),
    pytest.param(_d(op="insert"), V, None, id="op-lowercase"),
    pytest.param(_d(op=""), V, None, id="op-empty"),
    pytest.param(_d(op=None), V, None, id="op-null"),
    pytest.param(_d(op="DELETE"), V, None, id="delete-with-columns"),
    pytest.param(
        _d(columns=[{"column": "title", "value": 1}, {"column": "title", "value": 2}]),
        V,
        None,
        id="duplicate-column",
    ),
    pytest.param(_d(columns={"title": "x"}), V, None, id="columns-object"),
    pytest.param(_d(columns=[{"column": "title"}]), V, None, id="column-without-value"),
    pytest.param(_d(columns=["title"]), V, None, id="column-not-object"),
    pytest.param(_d(columns=...), V, None, id="columns-missing"),
    pytest.param(_d(rowId=""), V, None, id="rowId-empty"),
    pytest.param(_d(rowId=12), V, None, id="rowId-number"),
    pytest.param(_d(rowId="r" * 1025), V, None, id="rowId-1025-chars"),
    pytest.param(_d(clientId=""), V, None, id="delta-clientId-empty"),
    pytest.param(_d(deltaId=""), V, None, id="deltaId-empty"),
    pytest.param(_d(deltaId=...), V, None, id="deltaId-missing"),
    pytest.param(_d(table=5), V, None, id="table-number"),
]


@pytest.mark.parametrize(("make", "code", "message"), PUSH_CASES)
def test_bad_push_body_is_400_and_writes_nothing(
    shared: Gateway, seeded: str, make: Case, code: str, message: str | None
) -> None:
    body = make(shared)
    rejected(shared, seeded, lambda: shared.push_raw(seeded, body), 400, code, message)


HOSTILE_NAMES = [
    "bad-table",
    "x; DROP TABLE wal_entries;--",
    '"quoted"',
    "todos\n",
    "1starts_with_digit",
    "ünïcödé",
    "таблица",
    "表",
    "a" * 65,
    "",
    " todos",
    "todos.sub",
    "todos\x00",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=repr)
@pytest.mark.parametrize("where", ["table", "column"])
def test_hostile_identifiers_are_422(shared: Gateway, seeded: str, name: str, where: str) -> None:
    if where == "table":
        d = delta_json(shared, table=name)
    else:
        d = delta_json(shared, columns=[{"column": name, "value": 1}])
    body = rejected(
        shared,
        seeded,
        lambda: shared.push_raw(seeded, push_body(shared, d)),
        422,
        "SCHEMA_ERROR",
    )
    assert body["error"].startswith(f'Invalid SQL identifier: "{name}".')
    assert ID_RULE in body["error"]


def test_sql_looking_but_valid_identifiers_are_just_data(shared: Gateway, seeded: str) -> None:
    """Names of the WAL's own tables are ordinary synced tables/columns, nothing more."""
    d = shared.delta("r1", {"wal_entries": "x", "sqlite_master": 1}, table="wal_entries")
    assert shared.push(seeded, [d]).status_code == 200
    d2 = shared.delta("r2", {"a" * 64: "max length"}, table="_" + "t" * 63)
    assert shared.push(seeded, [d2]).status_code == 200
    rows = {x["rowId"]: x for x in shared.pull_all(seeded) if x["op"] == "INSERT"}
    assert rows["r1"]["table"] == "wal_entries"
    assert {c["column"]: c["value"] for c in rows["r1"]["columns"]} == {
        "wal_entries": "x",
        "sqlite_master": 1,
    }
    assert rows["r2"]["columns"] == [{"column": "a" * 64, "value": "max length"}]
    assert "seed" in rows  # the gateway's own tables are untouched


# ---------------------------------------------------------------------- unicode data


UNICODE_ROWS = {
    "ключ-1": "Привет, мир",
    "行🙂": "emoji 😀🎉👩‍👩‍👧 and astral 𝄞",
    "tab\tnew\nline\r\x01\x1f\x7f": "control \x01\x02\x1b\x1f chars",
    "\u200b\ufeff": "zero width \u200b and BOM \ufeff",
    "مرحبا": "right-to-left \u202e text",
    "e\u0301": "combining e\u0301 vs \xe9",
    "quote\"back\\slash'": '{"not": "json"} </script>',
    "🙂" * 200: "long astral row id",
}


def test_unicode_values_and_row_ids_round_trip_exactly(shared: Gateway, gw: str) -> None:
    nested = {"ключ": ["😀", {"e\u0301": None}], "\x01": 1.5, "": True}
    deltas = [
        shared.delta(rid, {"title": value, "meta": nested}, counter=i)
        for i, (rid, value) in enumerate(UNICODE_ROWS.items())
    ]
    resp = shared.push(gw, deltas)
    assert resp.status_code == 200, resp.text
    assert [d["rowId"] for d in resp.json()["deltas"]] == list(UNICODE_ROWS)
    pulled = shared.pull_all(gw)
    got = {
        d["rowId"]: {c["column"]: c["value"] for c in d["columns"]}
        for d in pulled
        if d["op"] == "INSERT"
    }
    assert got == {rid: {"title": v, "meta": nested} for rid, v in UNICODE_ROWS.items()}
    stamped = shared.pull(gw, format="stamped", limit="100").json()["deltas"]
    assert {d["rowId"] for d in stamped} == set(UNICODE_ROWS)


# ---------------------------------------------------------------------- size limits


def test_content_length_over_1_mib_is_413(shared: Gateway, seeded: str) -> None:
    body = b'{"clientId":"c1","deltas":[],"pad":"' + b"x" * MIB + b'"}'
    rejected(shared, seeded, lambda: shared.push_raw(seeded, body), 413, V, TOO_LARGE)


def test_chunked_body_over_1_mib_is_413(shared: Gateway, seeded: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"clientId":"c1","deltas":[],"pad":"'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"}'

    def send() -> httpx.Response:
        resp = shared.push_raw(seeded, chunks())
        assert resp.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in resp.request.headers
        return resp

    rejected(shared, seeded, send, 413, V, TOO_LARGE)


def test_body_of_exactly_1_mib_is_accepted(shared: Gateway, seeded: str) -> None:
    d = delta_json(shared, "big", columns=[{"column": "title", "value": "@@"}])
    head = push_body(shared, d)
    body = head.replace(b'"@@"', b'"' + b"y" * (MIB - len(head) + 2) + b'"')
    assert len(body) == MIB
    resp = shared.push_raw(seeded, body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["accepted"] == 1


def test_admin_body_over_1_mib_is_413(shared: Gateway, seeded: str) -> None:
    body = b'{"table":"t","columns":[],"pad":"' + b"x" * MIB + b'"}'
    rejected(
        shared,
        seeded,
        lambda: shared.client.post(
            f"/v1/admin/schema/{seeded}", content=body, headers=shared.admin(seeded)
        ),
        413,
        V,
        TOO_LARGE,
    )


# ---------------------------------------------------------------------- identity checks


def test_push_client_id_must_equal_token_sub(shared: Gateway, seeded: str) -> None:
    d = shared.delta("r1", {"title": "x"}, client_id="mallory")
    rejected(
        shared,
        seeded,
        lambda: shared.push(seeded, [d], client_id="mallory", headers=shared.auth("c1", seeded)),
        403,
        "FORBIDDEN",
        PUSH_MISMATCH,
    )


def test_delta_client_id_must_equal_push_client_id(shared: Gateway, seeded: str) -> None:
    ok = shared.delta("r1", {"title": "x"})
    forged = shared.delta("r2", {"title": "x"}, client_id="someone-else")
    body = rejected(shared, seeded, lambda: shared.push(seeded, [ok, forged]), 403, "FORBIDDEN")
    assert "someone-else" in body["error"]


# ---------------------------------------------------------------------- clock drift, atomicity


def test_clock_drift_is_409(shared: Gateway, seeded: str) -> None:
    d = shared.delta("r1", {"title": "future"}, ahead_ms=6000)
    rejected(
        shared,
        seeded,
        lambda: shared.push(seeded, [d]),
        409,
        "CLOCK_DRIFT",
        "Remote clock is 6000ms ahead (max drift: 5000ms)",
    )
    far = delta_json(shared, hlc=str(2**64 - 1))
    body = rejected(
        shared, seeded, lambda: shared.push_raw(seeded, push_body(shared, far)), 409, "CLOCK_DRIFT"
    )
    assert body["error"].startswith("Remote clock is ")
    assert body["error"].endswith("ms ahead (max drift: 5000ms)")


def test_drift_boundary_5000ms_is_accepted(shared: Gateway, gw: str) -> None:
    assert_error(
        shared.push(gw, [shared.delta("r1", {"title": "x"}, ahead_ms=5001)]),
        409,
        "CLOCK_DRIFT",
        "Remote clock is 5001ms ahead (max drift: 5000ms)",
    )
    ok = shared.push(gw, [shared.delta("r1", {"title": "x"}, ahead_ms=5000)])
    assert ok.status_code == 200, ok.text


def _five(g: Gateway, **third: Any) -> list[dict[str, Any]]:
    out = []
    for i in range(5):
        d = g.delta(f"batch{i}", {"title": f"t{i}"}, counter=i)
        w = wire(d)
        if i == 2:
            w.update(third)
        out.append(w)
    return out


def _assert_none_of_batch_written(g: Gateway, gw: str, batch: list[dict[str, Any]]) -> None:
    rows = {d["rowId"] for d in g.pull_all(gw)}
    assert not rows & {d["rowId"] for d in batch}
    # their deltaIds were not remembered either: the valid ones are new when pushed again
    good = [d for i, d in enumerate(batch) if i != 2]
    again = g.push(gw, good)
    assert again.status_code == 200, again.text
    assert again.json()["accepted"] == 4
    assert [d["deltaId"] for d in again.json()["deltas"]] == [d["deltaId"] for d in good]


def test_batch_with_drifting_third_delta_writes_nothing(shared: Gateway, seeded: str) -> None:
    batch = _five(shared, hlc=str(shared.hlc(ahead_ms=6000)))
    rejected(
        shared,
        seeded,
        lambda: shared.push(seeded, batch),
        409,
        "CLOCK_DRIFT",
        "Remote clock is 6000ms ahead (max drift: 5000ms)",
    )
    _assert_none_of_batch_written(shared, seeded, batch)


def test_batch_with_unknown_column_under_schema_writes_nothing(
    shared: Gateway, seeded: str
) -> None:
    schema = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
    saved = shared.client.post(
        f"/v1/admin/schema/{seeded}", json=schema, headers=shared.admin(seeded)
    )
    assert saved.status_code == 200, saved.text
    batch = _five(shared, columns=[{"column": "title", "value": "t"}, {"column": "x", "value": 1}])
    body = rejected(shared, seeded, lambda: shared.push(seeded, batch), 422, "SCHEMA_ERROR")
    assert body["error"].startswith('Unknown column "x" in delta for table "todos".')
    wrong_type = _five(shared, columns=[{"column": "title", "value": ["not", "a", "string"]}])
    rejected(shared, seeded, lambda: shared.push(seeded, wrong_type), 422, "SCHEMA_ERROR")
    _assert_none_of_batch_written(shared, seeded, batch)


@pytest.mark.parametrize(
    ("third", "status", "code"),
    [
        ({"table": "bad-table"}, 422, "SCHEMA_ERROR"),
        ({"op": "DELETE"}, 400, V),  # a DELETE with columns
        ({"hlc": 17}, 400, V),
        ({"clientId": "other"}, 403, "FORBIDDEN"),
    ],
    ids=["bad-table", "delete-with-columns", "numeric-hlc", "foreign-clientId"],
)
def test_batch_with_one_bad_delta_writes_nothing(
    shared: Gateway, seeded: str, third: dict[str, Any], status: int, code: str
) -> None:
    batch = _five(shared, **third)
    rejected(shared, seeded, lambda: shared.push(seeded, batch), status, code)
    _assert_none_of_batch_written(shared, seeded, batch)


# ---------------------------------------------------------------------- tokens


def _forged_tokens(gw: str) -> list[Any]:
    now = int(time.time())
    valid = token("c1", gw)
    header_none = b64({"alg": "none", "typ": "JWT"})
    payload = b64({"sub": "c1", "gw": gw, "role": "admin", "exp": now + 3600})
    unsupported = 'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}'
    return [
        pytest.param(None, 401, "AUTH_ERROR", "Missing Bearer token", id="no-authorization"),
        pytest.param("", 401, "AUTH_ERROR", "Missing Bearer token", id="empty-authorization"),
        pytest.param("Bearer", 401, "AUTH_ERROR", "Missing Bearer token", id="bearer-no-token"),
        pytest.param(f"Basic {valid}", 401, "AUTH_ERROR", "Missing Bearer token", id="basic"),
        pytest.param(f"Bearer {valid} x", 401, "AUTH_ERROR", "Missing Bearer token", id="2-tok"),
        pytest.param("Bearer garbage", 401, "AUTH_ERROR", None, id="garbage-bearer"),
        pytest.param("Bearer a.b.c", 401, "AUTH_ERROR", None, id="three-garbage-segments"),
        pytest.param("Bearer " + "A" * 70000, 401, "AUTH_ERROR", None, id="huge-token"),
        pytest.param(
            "Bearer " + token("c1", gw, secret="wrong-secret"),
            401,
            "AUTH_ERROR",
            "Invalid JWT signature",
            id="wrong-secret",
        ),
        pytest.param(
            "Bearer " + valid[:-4] + ("AAAA" if not valid.endswith("AAAA") else "BBBB"),
            401,
            "AUTH_ERROR",
            "Invalid JWT signature",
            id="tampered-signature",
        ),
        pytest.param(
            "Bearer " + sign_token({"sub": "c1", "gw": gw}, SECRET, now_s=now - 7200),
            401,
            "AUTH_ERROR",
            "JWT has expired",
            id="expired",
        ),
        pytest.param(
            f"Bearer {header_none}.{payload}.", 401, "AUTH_ERROR", None, id="alg-none-unsigned"
        ),
        pytest.param(
            f"Bearer {header_none}.{payload}.{valid.split('.')[2]}",
            401,
            "AUTH_ERROR",
            unsupported,
            id="alg-none-signed",
        ),
        pytest.param(
            f"Bearer {b64({'alg': 'HS256'})}.{payload}.{valid.split('.')[2]}",
            401,
            "AUTH_ERROR",
            unsupported,
            id="no-typ",
        ),
        pytest.param(
            "Bearer " + sign_token({"gw": gw}, SECRET, now_s=now),
            401,
            "AUTH_ERROR",
            'Missing or invalid "sub" claim (clientId)',
            id="no-sub",
        ),
        pytest.param(
            "Bearer " + sign_token({"sub": "c1"}, SECRET, now_s=now),
            401,
            "AUTH_ERROR",
            'Missing or invalid "gw" claim (gatewayId)',
            id="no-gw",
        ),
        pytest.param(
            "Bearer " + token("c1", "some_other_gw"),
            403,
            "AUTH_ERROR",
            GW_MISMATCH,
            id="other-gateway",
        ),
    ]


def _token_cases() -> list[Any]:
    # tokens are minted per test (for its gateway id); the ids are what parametrize needs
    return [pytest.param(i, id=p.id) for i, p in enumerate(_forged_tokens("x"))]


@pytest.mark.parametrize("index", _token_cases())
@pytest.mark.parametrize("route", ["push", "pull", "admin-metrics", "admin-schema"])
def test_bad_tokens_are_rejected_and_write_nothing(
    shared: Gateway, seeded: str, index: int, route: str
) -> None:
    header, status, code, message = _forged_tokens(seeded)[index].values
    headers = {} if header is None else {"Authorization": header}
    send: dict[str, Callable[[], httpx.Response]] = {
        "push": lambda: shared.push(seeded, [shared.delta("r1", {"title": "x"})], headers=headers),
        "pull": lambda: shared.pull(seeded, headers=headers),
        "admin-metrics": lambda: shared.client.get(f"/v1/admin/metrics/{seeded}", headers=headers),
        "admin-schema": lambda: shared.client.post(
            f"/v1/admin/schema/{seeded}",
            json={"table": "todos", "columns": [{"name": "title", "type": "string"}]},
            headers=headers,
        ),
    }
    rejected(shared, seeded, send[route], status, code, message)


ADMIN_ROUTES = [
    ("GET", "/v1/admin/metrics/{gw}", None),
    ("POST", "/v1/admin/flush/{gw}", None),
    ("GET", "/v1/admin/schema/{gw}", None),
    ("POST", "/v1/admin/schema/{gw}", {"table": "t", "columns": [{"name": "a", "type": "string"}]}),
    ("GET", "/v1/admin/sync-rules/{gw}", None),
    ("POST", "/v1/admin/sync-rules/{gw}", {"version": 1, "buckets": []}),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES, ids=lambda x: str(x)[:30])
def test_non_admin_token_on_admin_routes_is_403(
    shared: Gateway, seeded: str, method: str, path: str, body: Any
) -> None:
    url = path.format(gw=seeded)
    for role in ("client", "ADMIN", "admin "):
        headers = shared.auth("c1", seeded, role=role)
        rejected(
            shared,
            seeded,
            lambda h=headers: shared.client.request(method, url, json=body, headers=h),  # type: ignore[misc]
            403,
            "AUTH_ERROR",
            ADMIN_REQUIRED,
        )


# ---------------------------------------------------------------------- admin bodies


@pytest.mark.parametrize("route", ["schema", "sync-rules"])
@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{not json", "Invalid JSON body", id="malformed"),
        pytest.param(b"", "Invalid JSON body", id="empty"),
        pytest.param(b'{"table":"\xff\xfe"}', "Invalid JSON body", id="invalid-utf8"),
        pytest.param(b"[" * 5000 + b"]" * 5000, None, id="nesting-5000-deep"),
    ],
)
def test_bad_admin_json_is_400(
    shared: Gateway, seeded: str, route: str, body: bytes, message: str | None
) -> None:
    rejected(
        shared,
        seeded,
        lambda: shared.client.post(
            f"/v1/admin/{route}/{seeded}", content=body, headers=shared.admin(seeded)
        ),
        400,
        V,
        message,
    )


@pytest.mark.parametrize(
    ("route", "body", "code"),
    [
        ("schema", [], "SCHEMA_ERROR"),
        ("schema", {"table": "bad-table", "columns": []}, "SCHEMA_ERROR"),
        ("schema", {"table": "t", "columns": [{"name": "x;--", "type": "string"}]}, "SCHEMA_ERROR"),
        ("sync-rules", [], V),
        ("sync-rules", {"version": 0, "buckets": []}, V),
        ("sync-rules", {"version": 1, "buckets": [{"name": "b", "tables": ["-"]}]}, V),
    ],
)  # fmt: skip
def test_invalid_admin_documents_are_400(
    shared: Gateway, seeded: str, route: str, body: Any, code: str
) -> None:
    rejected(
        shared,
        seeded,
        lambda: shared.client.post(
            f"/v1/admin/{route}/{seeded}", json=body, headers=shared.admin(seeded)
        ),
        400,
        code,
    )


# ---------------------------------------------------------------------- pull parameters


@pytest.mark.parametrize(
    ("params", "status", "code", "message"),
    [
        pytest.param({}, 400, V, MISSING_PARAMS, id="none"),
        pytest.param({"clientId": "c1"}, 400, V, MISSING_PARAMS, id="no-since"),
        pytest.param({"since": "0"}, 400, V, MISSING_PARAMS, id="no-clientId"),
        pytest.param({"since": "", "clientId": "c1"}, 400, V, MISSING_PARAMS, id="since-empty"),
        pytest.param({"since": "0", "clientId": ""}, 400, V, MISSING_PARAMS, id="clientId-empty"),
        pytest.param({"since": "1e3", "clientId": "c1"}, 400, V, BAD_SINCE, id="since-1e3"),
        pytest.param({"since": "abc", "clientId": "c1"}, 400, V, BAD_SINCE, id="since-abc"),
        pytest.param({"since": "1.5", "clientId": "c1"}, 400, V, BAD_SINCE, id="since-1.5"),
        pytest.param({"since": "0x", "clientId": "c1"}, 400, V, BAD_SINCE, id="since-0x"),
        pytest.param({"since": "1 2", "clientId": "c1"}, 400, V, BAD_SINCE, id="since-1-2"),
        pytest.param({"since": "-0x1f", "clientId": "c1"}, 400, V, BAD_SINCE, id="since-neg-hex"),
        pytest.param({"since": "0x1_f", "clientId": "c1"}, 400, V, BAD_SINCE, id="since-0x1_f"),
        pytest.param({"since": "1" * 21, "clientId": "c1"}, 400, V, BAD_SINCE, id="since-2^64+"),
        pytest.param({"since": "0", "clientId": "c1", "limit": "0"}, 400, V, BAD_LIMIT, id="lim0"),
        pytest.param({"since": "0", "clientId": "c1", "limit": "abc"}, 400, V, BAD_LIMIT, id="abc"),
        pytest.param({"since": "0", "clientId": "c1", "limit": "-1"}, 400, V, BAD_LIMIT, id="-1"),
        pytest.param(
            {"since": "0", "clientId": "c1", "source": "x"},
            404,
            "SOURCE_NOT_FOUND",  # the reference's message; our code (a NOT_FOUND)
            'Source adapter "x" not found',
            id="unknown-source",
        ),
    ],
)
def test_bad_pull_parameters(
    shared: Gateway,
    seeded: str,
    params: dict[str, str],
    status: int,
    code: str,
    message: str,
) -> None:
    resp = shared.client.get(
        f"/v1/sync/{seeded}/pull", params=params, headers=shared.auth("c1", seeded)
    )
    assert_error(resp, status, code, message)
    shared.health_ok()


def test_lenient_pull_parameters_like_the_reference(shared: Gateway, gw: str) -> None:
    """``limit`` is parseInt'ed ("10abc" → 10); ``since`` is BigInt'ed (" 0 ", "0x0", "-5")."""
    rows = [shared.delta(f"r{i:02d}", {"n": i}, counter=i) for i in range(12)]
    assert shared.push(gw, rows).status_code == 200
    page = shared.pull(gw, limit="10abc").json()
    assert len(page["deltas"]) == 10 and page["hasMore"] is True  # 5 rows × (DELETE@0, INSERT)
    assert len(shared.pull(gw, limit=" 4").json()["deltas"]) == 4
    assert len(shared.pull(gw, limit="99999").json()["deltas"]) == 24  # clamped, not rejected
    for since in (" 0 ", "0x0", "-5", "+0"):
        resp = shared.pull(gw, since)
        assert resp.status_code == 200, (since, resp.text)
        assert len(resp.json()["deltas"]) == 24


def test_empty_limit_means_the_default(shared: Gateway, gw: str) -> None:
    """The reference reads ``limit`` as ``params.limit ? parseInt(...) : 100``."""
    assert shared.push(gw, [shared.delta("r1", {"n": 1})]).status_code == 200
    resp = shared.pull(gw, limit="")
    assert resp.status_code == 200, resp.text
    assert len(resp.json()["deltas"]) == 2


def test_pull_identity_checks(shared: Gateway, seeded: str) -> None:
    assert_error(
        shared.pull(seeded, client_id="someone-else", headers=shared.auth("c1", seeded)),
        403,
        "FORBIDDEN",
    )
    assert_error(
        shared.pull(seeded, headers=shared.auth("c1", "another_gw")), 403, "AUTH_ERROR", GW_MISMATCH
    )
    assert_error(
        shared.pull(seeded, client_id="x" * 2000, headers=shared.auth("x" * 2000, seeded)), 400, V
    )
    shared.health_ok()


@pytest.mark.parametrize(
    "bad_gw",
    [
        "a" * 200,
        "a" * 65,
        "bad!gw",
        "gätewäy",
        "-leading",
        "_leading",
        "a%20b",
        "a%00b",
        "demo.prod",  # a dot: the lake namespace separator (core.identifiers)
    ],
)
def test_invalid_gateway_id_in_path_is_400(shared: Gateway, bad_gw: str) -> None:
    tok = shared.auth("c1", "gw_valid")
    for method, path in (
        ("POST", f"/v1/sync/{bad_gw}/push"),
        ("GET", f"/v1/sync/{bad_gw}/pull?since=0&clientId=c1"),
        ("GET", f"/v1/sync/{bad_gw}/checkpoint"),
        ("GET", f"/v1/admin/metrics/{bad_gw}"),
        ("POST", f"/v1/admin/flush/{bad_gw}"),
    ):
        resp = shared.client.request(
            method, path, content=b'{"clientId":"c1","deltas":[]}', headers=tok
        )
        assert_error(resp, 400, V)
        assert resp.json()["error"].startswith("Invalid gateway id")
    assert all(len(g) <= 64 and "!" not in g for g in shared.state.wal.gateway_ids())
    shared.health_ok()


# ---------------------------------------------------------------------- fuzz

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _fuzz_delta(hlc_now: str) -> st.SearchStrategy[Any]:
    return st.one_of(
        json_values,
        st.fixed_dictionaries(
            {},
            optional={
                "op": st.sampled_from(["INSERT", "UPDATE", "DELETE"]) | json_values,
                "table": st.sampled_from(["todos", "bad-table", ""]) | json_values,
                "rowId": st.text(max_size=10) | json_values,
                "clientId": st.just("c1") | json_values,
                "columns": st.lists(
                    st.fixed_dictionaries(
                        {"column": st.sampled_from(["title", "done", "x-y"]) | json_values},
                        optional={"value": json_values},
                    ),
                    max_size=3,
                )
                | json_values,
                "hlc": st.sampled_from([hlc_now, "0", "-1", "1e3", str(2**64)])
                | st.integers()
                | json_values,
                "deltaId": st.text(max_size=10) | json_values,
            },
        ),
    )


@st.composite
def push_bodies(draw: st.DrawFn, hlc_now: str) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return json.dumps(draw(json_values)).encode()
    body = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "clientId": st.just("c1") | json_values,
                "deltas": st.lists(_fuzz_delta(hlc_now), max_size=4) | json_values,
                "lastSeenHlc": json_values,
            },
        )
    )
    return json.dumps(body).encode()


@pytest.fixture(scope="module")
def fuzz_gw(shared: Gateway) -> str:
    gw = "gw_fuzz"
    assert shared.push(gw, [shared.delta("seed", {"title": "s"})]).status_code == 200
    return gw


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_push_bodies_never_500(shared: Gateway, fuzz_gw: str, data: st.DataObject) -> None:
    body = data.draw(push_bodies(str(shared.hlc())))
    before = shared.snapshot(fuzz_gw)
    resp = shared.push_raw(fuzz_gw, body)
    assert resp.status_code in (200, 400, 403, 409, 422), resp.text
    if resp.status_code != 200:
        assert_error(resp, resp.status_code, resp.json()["code"])
        assert shared.snapshot(fuzz_gw) == before, "a rejected push wrote something"
    shared.health_ok()


# ---------------------------------------------------------------------- a real socket


def _raw_exchange(port: int, data: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        if not read:
            return b""
        s.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (ConnectionResetError, TimeoutError):
            pass
        return b"".join(chunks)


def test_real_server_survives_bad_input(tmp_path: Any) -> None:
    proc = GatewayProcess(tmp_path, SECRET).start()
    try:
        gw = "gw_real"
        auth = "Bearer " + token("c1", gw)
        port = proc.port
        push_path = f"/v1/sync/{gw}/push"

        # truncated body: Content-Length promises more than is sent, then the socket closes
        head = (
            f"POST {push_path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
            "Content-Type: application/json\r\n"
        )
        truncated = (head + "Content-Length: 5000\r\n\r\n").encode() + b'{"clientId":'
        _raw_exchange(port, truncated, read=False)
        # headers cut off mid-way
        _raw_exchange(port, f"POST {push_path} HTTP/1.1\r\nHost: x\r\nAuthor".encode(), read=False)
        # not HTTP at all
        garbage = _raw_exchange(port, b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
        assert garbage == b"" or garbage.startswith(b"HTTP/1.1 400"), garbage[:200]
        # a declared body over 1 MiB is refused without being read
        resp = _raw_exchange(port, (head + f"Content-Length: {MIB + 1}\r\n\r\n").encode())
        assert resp.startswith(b"HTTP/1.1 413"), resp[:200]
        assert b"Payload too large (max 1 MiB)" in resp

        with httpx.Client(base_url=proc.url, timeout=10, headers={"Authorization": auth}) as c:
            bad = c.post(push_path, content=b'{"clientId":"c1","deltas":[')
            assert_error(bad, 400, V, "Invalid JSON body")
            d = {"op": "INSERT", "table": "t", "rowId": "r", "clientId": "c1", "deltaId": "d"}
            numeric = {**d, "columns": [], "hlc": 1}
            # the reference server crashes on this one (PROTOCOL.md §1.2)
            assert_error(c.post(push_path, json={"clientId": "c1", "deltas": [numeric]}), 400, V)
            hostile = {**numeric, "hlc": "1", "table": "x;--"}
            resp = c.post(push_path, json={"clientId": "c1", "deltas": [hostile]})
            assert_error(resp, 422, "SCHEMA_ERROR")
            assert c.get("/health").json() == {"status": "ok"}
            assert c.get("/ready").status_code == 200
            now_hlc = str(int(time.time() * 1000) << 16)
            good = {**d, "hlc": now_hlc, "columns": [{"column": "v", "value": "ok"}]}
            ok = c.post(push_path, json={"clientId": "c1", "deltas": [good]})
            assert ok.status_code == 200, ok.text
            pulled = c.get(f"/v1/sync/{gw}/pull", params={"since": "0", "clientId": "c1"}).json()
            assert [d["rowId"] for d in pulled["deltas"] if d["op"] == "INSERT"] == ["r"]
        assert proc.proc is not None and proc.proc.poll() is None
    finally:
        proc.stop()
