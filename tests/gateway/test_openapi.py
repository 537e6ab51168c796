"""The generated OpenAPI document states the rules the gateway enforces (the contract test
fuzzes the gateway against it: see ``test_contract.py``)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.bodies import HLC_PATTERN
from lakesync_platform.core.errors import ERRORS_BY_CODE, ValidationError
from lakesync_platform.core.hlc import MAX_HLC
from lakesync_platform.core.identifiers import GATEWAY_ID_RE
from lakesync_platform.core.wire import parse_hlc

from .conftest import Gateway


@pytest.fixture(scope="module")
def document(shared: Gateway) -> dict[str, Any]:
    resp = shared.client.get("/v1/openapi.json")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    body: dict[str, Any] = resp.json()
    return body


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
    ]


def test_every_route_is_documented_once(document: dict[str, Any]) -> None:
    ops = {(method, path) for method, path, _ in _operations(document)}
    assert ops == {
        ("GET", "/health"),
        ("GET", "/ready"),
        ("GET", "/metrics"),
        ("POST", "/v1/sync/{gw}/push"),
        ("GET", "/v1/sync/{gw}/pull"),
        ("GET", "/v1/sync/{gw}/checkpoint"),
        ("POST", "/v1/sync/{gw}/action"),
        ("GET", "/v1/sync/{gw}/actions"),
        ("POST", "/v1/admin/schema/{gw}"),
        ("GET", "/v1/admin/schema/{gw}"),
        ("POST", "/v1/admin/sync-rules/{gw}"),
        ("GET", "/v1/admin/sync-rules/{gw}"),
        ("GET", "/v1/admin/metrics/{gw}"),
        ("POST", "/v1/admin/flush/{gw}"),
        ("POST", "/v1/admin/connectors/{gw}"),
        ("GET", "/v1/admin/connectors/{gw}"),
        ("DELETE", "/v1/admin/connectors/{gw}/{name}"),
    }
    assert document["openapi"].startswith("3.1")


def test_gateway_routes_state_the_id_rule_bearer_auth_and_their_errors(
    document: dict[str, Any],
) -> None:
    for method, path, op in _operations(document):
        if not path.startswith("/v1/"):
            continue
        (gw,) = [p for p in op["parameters"] if p["name"] == "gw"]
        assert gw["in"] == "path" and gw["required"] is True
        assert gw["schema"]["pattern"] == f"^(?:{GATEWAY_ID_RE.pattern})$"
        assert gw["schema"]["maxLength"] == 64
        assert op["security"] == [{"bearer": []}]
        statuses = set(op["responses"])
        assert {"400", "401", "403", "429"} <= statuses, (method, path)
        for status, response in op["responses"].items():
            if int(status) >= 400:
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_error_envelope_codes_are_the_registry(document: dict[str, Any]) -> None:
    error = document["components"]["schemas"]["ErrorBody"]
    assert error["properties"]["code"]["enum"] == list(ERRORS_BY_CODE)
    assert error["required"] == ["code", "error"]


def test_request_bodies_are_documented(document: dict[str, Any]) -> None:
    bodies = {
        (method, path): op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        for method, path, op in _operations(document)
        if "requestBody" in op
    }
    assert bodies == {
        ("POST", "/v1/sync/{gw}/push"): "#/components/schemas/PushRequest",
        ("POST", "/v1/sync/{gw}/action"): "#/components/schemas/ActionRequest",
        ("POST", "/v1/admin/schema/{gw}"): "#/components/schemas/TableSchemaBody",
        ("POST", "/v1/admin/sync-rules/{gw}"): "#/components/schemas/SyncRulesBody",
        ("POST", "/v1/admin/connectors/{gw}"): "#/components/schemas/ConnectorBody",
    }


def test_action_results_are_one_of_two_shapes(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    success, failure = schemas["ActionResponseBody"]["properties"]["results"]["items"]["oneOf"]
    assert success["required"] == ["actionId", "data", "serverHlc"]
    assert failure["required"] == ["actionId", "code", "message", "retryable"]
    assert schemas["ActionRequest"]["properties"]["actions"]["maxItems"] == 100


def test_pull_parameters(document: dict[str, Any]) -> None:
    pull = document["paths"]["/v1/sync/{gw}/pull"]["get"]
    params = {p["name"]: p for p in pull["parameters"]}
    assert params["since"]["required"] is True
    assert params["since"]["schema"]["pattern"] == HLC_PATTERN
    assert params["clientId"]["required"] is True
    assert params["limit"]["schema"]["type"] == "integer"
    assert params["format"]["schema"]["enum"] == ["stamped", ""]
    assert not params["limit"]["required"] and not params["source"]["required"]


_HLC_ACCEPTED = ["0", "7", "0" * 20, "9" * 19, "1" + "0" * 19, str(MAX_HLC - 1), str(MAX_HLC)]
_HLC_REJECTED = [str(MAX_HLC + 1), "9" * 20, "1" * 21, "", "-1", "1e3", "0x1f", " 1"]


@pytest.mark.parametrize("value", [*_HLC_ACCEPTED, *_HLC_REJECTED])
def test_hlc_pattern_is_the_codecs_rule(value: str) -> None:
    assert (re.fullmatch(HLC_PATTERN, value) is not None) == (value in _HLC_ACCEPTED)
    if value in _HLC_ACCEPTED:
        assert parse_hlc(value) == int(value)
    else:
        with pytest.raises(ValidationError):
            parse_hlc(value)


def test_wrong_method_answers_405_with_allow(shared: Gateway) -> None:
    resp = shared.client.request("TRACE", "/v1/sync/gw1/push")
    assert resp.status_code == 405
    assert set(resp.headers["allow"].split(", ")) == {"POST", "OPTIONS"}
    assert resp.json()["error"] == "Method not allowed"


def test_swagger_ui_reads_the_same_document(shared: Gateway, document: dict[str, Any]) -> None:
    resp = shared.client.get("/v1/docs")
    assert resp.status_code == 200
    assert "swagger" in resp.text.lower()
    assert shared.client.get("/v1/docs/openapi.json").json() == document
