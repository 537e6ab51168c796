"""Every route the gateway serves (PROTOCOL.md §4.1), its headers (§4.4), auth (§4.5) and the push/
pull semantics visible over HTTP (ARCHITECTURE.md §3–§4, §8–§9)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
import warnings
from typing import Any

import pytest

from gateway.app import create_app
from lakesync_platform.core.hlc import encode
from lakesync_platform.settings import GatewaySettings
from tests.helpers import SECRET, make_delta

from .conftest import Gateway, GatewayFactory, assert_error

DECIMAL = re.compile(r"(0|[1-9][0-9]*)")
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "strict-transport-security": "max-age=31536000; includeSubDomains",
}
TODOS = {
    "table": "todos",
    "columns": [{"name": "title", "type": "string"}, {"name": "done", "type": "boolean"}],
}
USER_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "user",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        }
    ],
}
GW_MISMATCH = "Gateway ID mismatch: JWT authorises a different gateway"


def inserts(deltas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Row id → column values of every live row in a (non-stamped) pull."""
    return {
        d["rowId"]: {c["column"]: c["value"] for c in d["columns"]}
        for d in deltas
        if d["op"] == "INSERT"
    }


# ---------------------------------------------------------------------- app construction


def test_create_app_emits_no_warnings(tmp_path: Any) -> None:
    """pytest runs with warnings as errors: building the app must not warn."""
    settings = GatewaySettings(wal_url=f"sqlite:///{tmp_path / 'wal.db'}", jwt_secrets=(SECRET,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        create_app(settings)
    assert [str(w.message) for w in caught] == []


def test_the_worker_app_factory_freezes_startup_objects_and_raises_gc_thresholds(
    tmp_path: Any,
) -> None:
    # in a child process: the factory changes the collector settings of its process
    code = (
        "import gc\n"
        "from gateway import serve\n"
        "from lakesync_platform.settings import GatewaySettings\n"
        f"settings = GatewaySettings(wal_url='sqlite:///{tmp_path}/w.db', auth_enabled=False)\n"
        "serve.worker_app(settings)\n"
        "assert gc.get_threshold() == serve.GC_THRESHOLDS, gc.get_threshold()\n"
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_auth_on_without_secret_is_a_configuration_error(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="no JWT secret"):
        GatewaySettings(wal_url=f"sqlite:///{tmp_path / 'wal.db'}", jwt_secrets=())
    with pytest.raises(ValueError, match="no JWT secret"):
        GatewaySettings(wal_url=f"sqlite:///{tmp_path / 'wal.db'}")


def test_auth_off_only_when_explicitly_configured(make_gateway: GatewayFactory) -> None:
    g = make_gateway(auth_enabled=False, jwt_secrets=())
    gw = "gw_open"
    resp = g.push(gw, [g.delta("r1", {"title": "open"})], headers={})
    assert resp.status_code == 200, resp.text
    pulled = g.client.get(f"/v1/sync/{gw}/pull", params={"since": "0", "clientId": "other"})
    assert pulled.status_code == 200
    assert inserts(pulled.json()["deltas"]) == {"r1": {"title": "open"}}
    assert g.client.get(f"/v1/admin/metrics/{gw}").status_code == 200
    assert g.client.post(f"/v1/admin/schema/{gw}", json=TODOS).status_code == 200
    assert g.client.post(f"/v1/admin/flush/{gw}").status_code == 202


# ---------------------------------------------------------------------- meta routes


def test_health_and_ready(shared: Gateway) -> None:
    resp = shared.client.get("/health")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}
    resp = shared.client.get("/ready")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ready"}


def test_ready_is_503_when_the_wal_is_unreachable(
    make_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = make_gateway()

    def unreachable() -> None:
        raise OSError("database is gone")

    monkeypatch.setattr(g.state.wal, "ping", unreachable)
    resp = g.client.get("/ready")
    assert resp.status_code == 503
    assert resp.json() == {"status": "not_ready", "reason": "adapter unreachable"}
    g.health_ok()  # liveness is not readiness


def test_slow_request_times_out_with_504(
    make_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = make_gateway(request_timeout_s=0.2)
    real_pull = g.state.services.sync.pull
    release = threading.Event()

    def slow_pull(*args: Any, **kwargs: Any) -> Any:
        release.wait(10)
        return real_pull(*args, **kwargs)

    monkeypatch.setattr(g.state.services.sync, "pull", slow_pull)
    started = time.monotonic()
    try:
        body = assert_error(g.pull("gw_slow"), 504, "INTERNAL_ERROR")
        assert time.monotonic() - started < 5
        assert body["error"].startswith("Request timeout")
    finally:
        release.set()
    g.health_ok()


def test_metrics_is_prometheus_text(shared: Gateway, gw: str) -> None:
    assert shared.push(gw, [shared.delta("r1", {"title": "x"})]).status_code == 200
    resp = shared.client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = resp.text
    assert "# TYPE lakesync_push_total counter" in text
    assert re.search(r'^lakesync_push_total\{status="ok"\} [1-9][0-9]*\.0$', text, re.M)
    assert re.search(r"^lakesync_pull_total [0-9]+\.0$", text, re.M)
    assert 'lakesync_push_latency_ms_bucket{le="+Inf"}' in text
    assert re.search(rf'^lakesync_buffer_bytes\{{gateway="{gw}"\}} [1-9][0-9]*\.0$', text, re.M)


def test_openapi_document_with_api_version_header(shared: Gateway) -> None:
    resp = shared.client.get("/v1/openapi.json")
    assert resp.status_code == 200
    assert resp.headers["api-version"] == "v1"
    doc = resp.json()
    assert doc["openapi"].startswith("3.")
    assert any("/push" in p for p in doc["paths"])


def test_checkpoint_without_one_is_404(shared: Gateway, gw: str) -> None:
    resp = shared.client.get(f"/v1/sync/{gw}/checkpoint", headers=shared.auth("c1", gw))
    assert_error(resp, 404, "NOT_FOUND", "No checkpoint available")
    # …and it is authenticated like every sync route
    resp = shared.client.get(f"/v1/sync/{gw}/checkpoint")
    assert_error(resp, 401, "AUTH_ERROR", "Missing Bearer token")


# ---------------------------------------------------------------------- headers


def test_a_pull_through_the_unversioned_alias_keeps_its_parameters(
    shared: Gateway, gw: str
) -> None:
    deltas = [
        make_delta("c1", encode(shared.now_ms, i), "todos", f"r{i}", {"n": i}) for i in (1, 2, 3)
    ]
    assert shared.push(gw, deltas).status_code == 200
    query = {"since": "0", "clientId": "c1", "limit": "2"}
    direct = shared.client.get(f"/v1/sync/{gw}/pull", params=query, headers=shared.auth("c1", gw))
    moved = shared.client.get(f"/sync/{gw}/pull", params=query, headers=shared.auth("c1", gw))
    assert moved.history[0].status_code == 301
    assert moved.status_code == 200 and moved.json() == direct.json()
    assert len(direct.json()["deltas"]) == 2 and direct.json()["hasMore"] is True
    # ?source= arrives too: an unknown source is named, not a pull without parameters
    query["source"] = "nope"
    moved = shared.client.get(f"/sync/{gw}/pull", params=query, headers=shared.auth("c1", gw))
    assert_error(moved, 404, "SOURCE_NOT_FOUND", 'Source adapter "nope" not found')


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/sync/{gw}/pull?since=0&clientId=c1"),
        ("GET", "/sync/{gw}/pull?since=0&clientId=c1&limit=5&source=crm"),
        ("GET", "/sync/{gw}/checkpoint?token=t.o.k"),
        ("POST", "/sync/{gw}/push"),
        ("POST", "/sync/{gw}/action"),
        ("GET", "/sync/{gw}/actions"),
        ("GET", "/admin/metrics/{gw}"),
        ("POST", "/admin/flush/{gw}"),
        ("DELETE", "/admin/connectors/{gw}/x"),
        ("GET", "/connectors/types"),
        # the path as sent: an escaped slash stays escaped, a non-Latin-1 one does not fail
        ("GET", "/sync/{gw}/pull?source=a%2Fb%20c"),
        ("GET", "/sync/%F0%9F%98%80/pull?since=0"),
    ],
)
def test_unversioned_paths_redirect_301(shared: Gateway, gw: str, method: str, path: str) -> None:
    """The query comes along (the reference drops it; its worker keeps it)."""
    resp = shared.client.request(method, path.format(gw=gw), follow_redirects=False)
    assert resp.status_code == 301
    assert resp.headers["location"] == "/v1" + path.format(gw=gw)
    assert resp.headers["sunset"] == "2026-06-01"
    assert resp.content == b""
    for k, v in SECURITY_HEADERS.items():
        assert resp.headers[k] == v


def test_options_preflight_is_204_with_cors(shared: Gateway, gw: str) -> None:
    resp = shared.client.options(
        f"/v1/sync/{gw}/push",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert resp.status_code == 204
    assert resp.content == b""
    assert resp.headers["access-control-allow-origin"] == "https://app.example"
    methods = {m.strip() for m in resp.headers["access-control-allow-methods"].split(",")}
    assert {"GET", "POST", "DELETE", "OPTIONS"} <= methods
    allowed = {h.strip().lower() for h in resp.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed
    assert resp.headers["access-control-max-age"] == "86400"
    # OPTIONS needs no token, even on admin routes
    assert shared.client.options(f"/v1/admin/metrics/{gw}").status_code == 204


def test_cors_reflects_origin_or_star_when_absent(shared: Gateway, gw: str) -> None:
    resp = shared.pull(gw, headers={**shared.auth("c1", gw), "Origin": "http://localhost:5173"})
    assert resp.status_code == 200
    assert resp.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert shared.client.get("/health").headers["access-control-allow-origin"] == "*"


def test_cors_allow_list(make_gateway: GatewayFactory) -> None:
    g = make_gateway(allowed_origins=("https://ok.example",))
    ok = g.client.options("/v1/sync/g1/push", headers={"Origin": "https://ok.example"})
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == "https://ok.example"
    bad = g.client.options("/v1/sync/g1/push", headers={"Origin": "https://evil.example"})
    assert bad.status_code == 204
    assert not any(k.startswith("access-control-") for k in bad.headers)


def _responses(g: Gateway, gw: str) -> dict[str, Any]:
    auth = g.auth("c1", gw)
    return {
        "health": g.client.get("/health"),
        "metrics": g.client.get("/metrics"),
        "push": g.push(gw, [g.delta("hdr", {"title": "h"})]),
        "pull": g.pull(gw),
        "admin": g.client.get(f"/v1/admin/metrics/{gw}", headers=g.admin(gw)),
        "401": g.client.get(f"/v1/sync/{gw}/pull?since=0&clientId=c1"),
        "400": g.client.get(f"/v1/sync/{gw}/pull?since=abc&clientId=c1", headers=auth),
        "404": g.client.get("/no/such/path"),
        "301": g.client.get(f"/sync/{gw}/pull", follow_redirects=False),
        "204": g.client.options(f"/v1/sync/{gw}/pull"),
    }


def test_security_headers_and_request_id_on_every_response(shared: Gateway, gw: str) -> None:
    seen: set[str] = set()
    for name, resp in _responses(shared, gw).items():
        for k, v in SECURITY_HEADERS.items():
            assert resp.headers.get(k) == v, (name, k)
        rid = resp.headers.get("x-request-id")
        assert rid, name
        assert rid not in seen, "request ids must be unique"
        seen.add(rid)


def test_incoming_request_id_is_echoed(shared: Gateway, gw: str) -> None:
    rid = f"trace-{uuid.uuid4()}"
    resp = shared.pull(gw, headers={**shared.auth("c1", gw), "X-Request-Id": rid})
    assert resp.status_code == 200
    assert resp.headers["x-request-id"] == rid
    # errors carry it in the envelope too
    resp = shared.client.get("/nope", headers={"X-Request-Id": rid})
    assert resp.headers["x-request-id"] == rid
    assert resp.json()["requestId"] == rid


def test_cache_control_no_store_on_sync_and_admin_only(shared: Gateway, gw: str) -> None:
    r = _responses(shared, gw)
    for name in ("push", "pull", "admin", "401", "400", "301"):
        assert r[name].headers.get("cache-control") == "no-store", name
    for name in ("health", "metrics"):
        assert "no-store" not in r[name].headers.get("cache-control", ""), name
    assert r["pull"].headers["api-version"] == "v1"


def test_unknown_path_is_404_envelope(shared: Gateway) -> None:
    for path in ("/nope", "/v1/sync", "/v1/sync/gw/unknown", "/v2/sync/gw/push"):
        resp = shared.client.get(path)
        body = assert_error(resp, 404, "NOT_FOUND", "Not found")
        assert set(body) == {"error", "code", "requestId"}


# ---------------------------------------------------------------------- push / pull


def test_push_response_shape_and_pull_returns_rows(shared: Gateway, gw: str) -> None:
    d1 = shared.delta("r1", {"title": "Buy milk", "done": False}, op="INSERT")
    d2 = shared.delta("r2", {"title": "Walk", "done": True}, op="INSERT", counter=1)
    resp = shared.push(gw, [d1, d2])
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"serverHlc", "accepted", "deltas"}
    assert isinstance(body["serverHlc"], str) and DECIMAL.fullmatch(body["serverHlc"])
    assert body["accepted"] == 2
    assert [(d["rowId"], d["deltaId"], d["hlc"]) for d in body["deltas"]] == [
        ("r1", d1.delta_id, str(d1.hlc)),
        ("r2", d2.delta_id, str(d2.hlc)),
    ]
    assert all(isinstance(d["hlc"], str) for d in body["deltas"])

    pulled = shared.pull(gw)
    assert pulled.status_code == 200
    page = pulled.json()
    assert set(page) == {"deltas", "serverHlc", "hasMore"}
    assert isinstance(page["serverHlc"], str) and DECIMAL.fullmatch(page["serverHlc"])
    assert page["hasMore"] is False
    assert inserts(page["deltas"]) == {
        "r1": {"title": "Buy milk", "done": False},
        "r2": {"title": "Walk", "done": True},
    }
    assert all(isinstance(d["hlc"], str) and DECIMAL.fullmatch(d["hlc"]) for d in page["deltas"])
    # the cursor works as `since`: nothing new after it
    again = shared.pull(gw, page["serverHlc"]).json()
    assert again["deltas"] == [] and again["hasMore"] is False
    # a push answers with the cursor this client last pulled from — never past unseen entries
    assert shared.pull(gw, page["serverHlc"]).status_code == 200
    after = shared.push(gw, [shared.delta("r3", {"title": "x"}, counter=2)]).json()
    assert after["serverHlc"] == page["serverHlc"]


def test_repush_of_same_batch_is_idempotent(shared: Gateway, gw: str) -> None:
    batch = [shared.delta(f"r{i}", {"title": f"t{i}"}, counter=i) for i in range(3)]
    first = shared.push(gw, batch)
    assert first.status_code == 200
    assert first.json()["accepted"] == 3 and len(first.json()["deltas"]) == 3
    before = shared.snapshot(gw)
    again = shared.push(gw, batch)
    assert again.status_code == 200, again.text
    assert again.json()["accepted"] == 3
    assert again.json()["deltas"] == []
    after = shared.snapshot(gw)
    for key in ("logSize", "indexSize", "byteSize", "liveRows", "entries", "deltaIds", "rows"):
        assert after[key] == before[key], key
    rows = inserts(shared.pull_all(gw))
    assert rows == {f"r{i}": {"title": f"t{i}"} for i in range(3)}


def test_pull_pages_with_has_more(shared: Gateway, gw: str) -> None:
    ids = [f"row{i:02d}" for i in range(7)]
    assert (
        shared.push(gw, [shared.delta(r, {"n": i}, counter=i) for i, r in enumerate(ids)])
    ).status_code == 200
    since, pages, got = "0", 0, []
    while True:
        resp = shared.pull(gw, since, limit="4")
        assert resp.status_code == 200
        page = resp.json()
        pages += 1
        assert len(page["deltas"]) <= 4
        assert page["deltas"], "a page is never empty while hasMore is true"
        assert DECIMAL.fullmatch(page["serverHlc"])
        assert int(page["serverHlc"]) > int(since)
        got += [d["rowId"] for d in page["deltas"] if d["op"] == "INSERT"]
        since = page["serverHlc"]
        if not page["hasMore"]:
            break
        assert pages < 20
    assert pages >= 3
    assert sorted(got) == ids  # every row exactly once
    tail = shared.pull(gw, since, limit="4").json()
    assert tail == {"deltas": [], "serverHlc": since, "hasMore": False}


def test_pull_stamped_format_carries_per_column_stamps(shared: Gateway, gw: str) -> None:
    a = shared.delta("r1", {"title": "a", "done": False}, client_id="c1")
    b = shared.delta("r1", {"done": True}, client_id="c2", counter=5)
    assert shared.push(gw, [a]).status_code == 200
    assert shared.push(gw, [b], client_id="c2").status_code == 200
    resp = shared.pull(gw, format="stamped")
    assert resp.status_code == 200
    (row,) = resp.json()["deltas"]
    assert row["rowId"] == "r1" and row["op"] == "INSERT"
    cols = {c["column"]: c for c in row["columns"]}
    assert cols["title"] == {"column": "title", "value": "a", "hlc": str(a.hlc), "clientId": "c1"}
    assert cols["done"] == {"column": "done", "value": True, "hlc": str(b.hlc), "clientId": "c2"}
    assert row["hlc"] == str(b.hlc)
    assert DECIMAL.fullmatch(row["deleteHlc"])
    # plain format: the same row as DELETE@0 + full-row INSERT
    plain = shared.pull(gw).json()["deltas"]
    assert [(d["op"], d["hlc"]) for d in plain] == [("DELETE", "0"), ("INSERT", str(b.hlc))]
    assert inserts(plain) == {"r1": {"title": "a", "done": True}}
    bad = shared.pull(gw, format="protobuf")
    assert_error(bad, 400, "VALIDATION_ERROR")


# ---------------------------------------------------------------------- admin routes


def test_admin_schema_register_list_enforce_and_evolve(shared: Gateway, gw: str) -> None:
    admin = shared.admin(gw)
    url = f"/v1/admin/schema/{gw}"
    assert shared.client.get(url, headers=admin).json() == {"schemas": []}
    resp = shared.client.post(url, json=TODOS, headers=admin)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"saved": True, "table": "todos", "version": 1}
    listed = shared.client.get(url, headers=admin)
    assert listed.status_code == 200
    (schema,) = listed.json()["schemas"]
    assert schema["table"] == "todos" and schema["version"] == 1
    assert schema["columns"] == TODOS["columns"]

    # enforced on push: unknown column and wrong type → 422, nothing written
    before = shared.snapshot(gw)
    unknown = shared.push(gw, [shared.delta("r1", {"title": "x", "nope": 1})])
    assert_error(
        unknown,
        422,
        "SCHEMA_ERROR",
        'Unknown column "nope" in delta for table "todos". '
        "Schema version 1 does not include this column.",
    )
    wrong = shared.push(gw, [shared.delta("r1", {"title": 42})])
    body = assert_error(wrong, 422, "SCHEMA_ERROR")
    assert '"title"' in body["error"] and '"string"' in body["error"]
    assert shared.snapshot(gw) == before
    ok = shared.push(gw, [shared.delta("r1", {"title": "fine", "done": None})])
    assert ok.status_code == 200, ok.text

    # additive evolution → version 2; removing or retyping a column → 400 SCHEMA_ERROR
    evolved = {**TODOS, "columns": [*TODOS["columns"], {"name": "prio", "type": "number"}]}
    resp = shared.client.post(url, json=evolved, headers=admin)
    assert resp.json() == {"saved": True, "table": "todos", "version": 2}
    assert shared.push(gw, [shared.delta("r1", {"prio": 3}, counter=1)]).status_code == 200
    removed = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
    assert_error(
        shared.client.post(url, json=removed, headers=admin),
        400,
        "SCHEMA_ERROR",
        'Cannot remove column "done" — only adding nullable columns is supported',
    )
    retyped = {**evolved, "columns": [{"name": "title", "type": "number"}, *evolved["columns"][1:]]}
    assert_error(shared.client.post(url, json=retyped, headers=admin), 400, "SCHEMA_ERROR")
    bad_type = {"table": "t2", "columns": [{"name": "title", "type": "text"}]}
    assert_error(
        shared.client.post(url, json=bad_type, headers=admin),
        400,
        "SCHEMA_ERROR",
        'Invalid column type "text" for column "title". '
        "Allowed: string, number, boolean, json, null",
    )
    assert_error(
        shared.client.post(url, json={"table": "t3"}, headers=admin),
        400,
        "SCHEMA_ERROR",
        "Missing required fields: table, columns",
    )
    (final,) = shared.client.get(url, headers=admin).json()["schemas"]
    assert final["version"] == 2 and [c["name"] for c in final["columns"]] == [
        "title",
        "done",
        "prio",
    ]


def test_admin_sync_rules_save_get_and_apply(shared: Gateway, gw: str) -> None:
    admin = shared.admin(gw)
    url = f"/v1/admin/sync-rules/{gw}"
    assert_error(shared.client.get(url, headers=admin), 404, "NOT_FOUND")
    resp = shared.client.post(url, json=USER_RULES, headers=admin)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"saved": True}
    got = shared.client.get(url, headers=admin)
    assert got.status_code == 200
    assert got.json() == USER_RULES
    invalid = {"version": 1, "buckets": [{"name": "b", "tables": [], "filters": [
        {"column": "x", "op": "like", "value": "v"}]}]}  # fmt: skip
    assert_error(
        shared.client.post(url, json=invalid, headers=admin),
        400,
        "VALIDATION_ERROR",
        'Bucket "b" filter at index 0 op must be one of: eq, in, neq, gt, lt, gte, lte',
    )
    assert shared.client.get(url, headers=admin).json() == USER_RULES  # unchanged
    # the rules filter pulls by the caller's claims
    for user in ("alice", "bob"):
        d = shared.delta(f"{user}-row", {"owner": user}, client_id=user)
        assert shared.push(gw, [d], client_id=user).status_code == 200
    assert set(inserts(shared.pull_all(gw, "alice"))) == {"alice-row"}
    assert set(inserts(shared.pull_all(gw, "bob"))) == {"bob-row"}


def test_admin_metrics_and_flush_request(shared: Gateway, gw: str) -> None:
    assert shared.push(gw, [shared.delta("r1", {"title": "x"})]).status_code == 200
    m = shared.metrics(gw)
    assert m["logSize"] == 1 and m["indexSize"] == 1 and m["liveRows"] == 1
    assert m["byteSize"] > 0
    assert DECIMAL.fullmatch(m["cursor"]) and int(m["cursor"]) >= 1
    assert m["flushRequests"] == []
    assert isinstance(m["process"], dict)

    resp = shared.client.post(f"/v1/admin/flush/{gw}", headers=shared.admin(gw))
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert isinstance(body["requestId"], str) and body["requestId"]
    assert body["status"] == "pending"
    requests = shared.metrics(gw)["flushRequests"]
    assert [(r["requestId"], r["status"]) for r in requests] == [(body["requestId"], "pending")]


# ---------------------------------------------------------------------- multi-gateway isolation


def test_token_for_one_gateway_never_reaches_another(shared: Gateway) -> None:
    gw_a, gw_b = f"gwA_{uuid.uuid4().hex[:8]}", f"gwB_{uuid.uuid4().hex[:8]}"
    tok_a, adm_a = shared.auth("c1", gw_a), shared.admin(gw_a)
    assert shared.push(gw_a, [shared.delta("secret", {"title": "only A"})]).status_code == 200
    assert shared.push(gw_b, [shared.delta("b-row", {"title": "only B"})]).status_code == 200
    before_b = shared.snapshot(gw_b)

    attempts = [
        shared.push(gw_b, [shared.delta("x", {"title": "A→B"}, counter=9)], headers=tok_a),
        shared.pull(gw_b, headers=tok_a),
        shared.client.get(f"/v1/sync/{gw_b}/checkpoint", headers=tok_a),
        shared.client.get(f"/v1/admin/metrics/{gw_b}", headers=adm_a),
        shared.client.post(f"/v1/admin/flush/{gw_b}", headers=adm_a),
        shared.client.get(f"/v1/admin/schema/{gw_b}", headers=adm_a),
        shared.client.post(f"/v1/admin/schema/{gw_b}", json=TODOS, headers=adm_a),
        shared.client.get(f"/v1/admin/sync-rules/{gw_b}", headers=adm_a),
        shared.client.post(f"/v1/admin/sync-rules/{gw_b}", json=USER_RULES, headers=adm_a),
    ]
    for resp in attempts:
        assert_error(resp, 403, "AUTH_ERROR", GW_MISMATCH)
    assert shared.snapshot(gw_b) == before_b

    assert set(inserts(shared.pull_all(gw_b))) == {"b-row"}
    assert set(inserts(shared.pull_all(gw_a))) == {"secret"}
    stamped = shared.pull(gw_b, format="stamped").json()["deltas"]
    assert [d["rowId"] for d in stamped] == ["b-row"]


# ---------------------------------------------------------------------- limits


def test_backpressure_rejects_pushes_over_the_backlog_bound(make_gateway: GatewayFactory) -> None:
    g = make_gateway(max_backlog_bytes=2000)
    gw = "gw_bp"
    accepted = 0
    for i in range(100):
        resp = g.push(gw, [g.delta(f"r{i}", {"title": "x" * 200}, counter=i)])
        if resp.status_code != 200:
            break
        accepted += 1
    else:
        raise AssertionError("backpressure never kicked in")
    assert accepted >= 1
    before = g.snapshot(gw)
    assert before["byteSize"] >= 2000
    body = assert_error(resp, 503, "BACKPRESSURE_ERROR")
    assert "2000" in body["error"]
    assert g.snapshot(gw) == before  # the rejected push wrote nothing
    # once the pipeline has flushed the backlog, pushes are accepted again
    g.state.wal.set_flush_watermark(gw, int(before["cursor"]))
    assert g.push(gw, [g.delta("after", {"title": "y"}, counter=500)]).status_code == 200


def test_rate_limit_answers_429_with_retry_after(make_gateway: GatewayFactory) -> None:
    g = make_gateway(rate_limit=3)
    gw = "gw_rl"
    assert g.push(gw, [g.delta("r1", {"title": "x"})]).status_code == 200
    assert g.pull(gw).status_code == 200
    assert g.pull(gw).status_code == 200
    before = g.snapshot(gw)
    limited = g.push(gw, [g.delta("r2", {"title": "y"}, counter=1)])
    assert_error(limited, 429, "RATE_LIMITED", "Too many requests")
    retry = int(limited.headers["retry-after"])
    assert 1 <= retry <= 60
    assert_error(g.pull(gw), 429, "RATE_LIMITED", "Too many requests")
    assert g.snapshot(gw) == before
    # the window is per caller: another client is unaffected
    assert g.pull(gw, client_id="c2").status_code == 200
    g.health_ok()
