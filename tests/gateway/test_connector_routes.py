"""The connector admin routes: register, list with secrets masked, unregister; validation as
PROTOCOL.md §11.1 with the §4.2 envelope; admin only, and only for the token's gateway."""

from __future__ import annotations

from typing import Any

from lakesync_platform.core.connectors import MASK

from .conftest import Gateway, assert_error

BODY: dict[str, Any] = {
    "name": "shop",
    "type": "postgres",
    "postgres": {"connectionString": "postgresql://app:${SHOP_PW}@db:5432/shop"},
    "schedule": "*/10 * * * *",
    "ingest": {
        "tables": [{"table": "items", "strategy": {"type": "cursor", "cursorColumn": "updated_at"}}]
    },
}


def url(gw: str, name: str = "") -> str:
    return f"/v1/admin/connectors/{gw}" + (f"/{name}" if name else "")


def test_register_list_and_unregister(shared: Gateway, gw: str) -> None:
    admin = shared.admin(gw)
    resp = shared.client.post(url(gw), json=BODY, headers=admin)
    assert resp.status_code == 200 and resp.json() == {"registered": True, "name": "shop"}
    listed = shared.client.get(url(gw), headers=admin).json()
    assert [(c["name"], c["type"], c["hasIngest"], c["isPolling"]) for c in listed] == [
        ("shop", "postgres", True, True)
    ]
    assert listed[0]["schedule"] == "*/10 * * * *"
    shown = listed[0]["config"]["postgres"]["connectionString"]
    assert shown == f"postgresql://app:{MASK}@db:5432/shop" and "SHOP_PW" not in resp.text
    assert_error(
        shared.client.post(url(gw), json=BODY, headers=admin),
        409,
        "VALIDATION_ERROR",
        'Connector "shop" is already registered',
    )
    resp = shared.client.delete(url(gw, "shop"), headers=admin)
    assert resp.status_code == 200 and resp.json() == {"unregistered": True, "name": "shop"}
    assert shared.client.get(url(gw), headers=admin).json() == []
    assert_error(
        shared.client.delete(url(gw, "shop"), headers=admin),
        404,
        "NOT_FOUND",
        'Connector "shop" not found',
    )


def test_a_bad_body_is_a_clear_400_and_writes_nothing(shared: Gateway, gw: str) -> None:
    admin = shared.admin(gw)
    cases = [
        (b"{", "Invalid JSON body"),
        (
            {**BODY, "type": "oracle"},
            "type must be one of postgres, mysql, bigquery, jira, salesforce - at `$.type`",
        ),
        (
            {k: v for k, v in BODY.items() if k != "postgres"},
            'Connector type "postgres" requires a postgres config - at `$.postgres`',
        ),
        (
            {**BODY, "postgres": {"connectionString": "postgresql://app:hunter2@db/shop"}},
            "the password in connectionString must be a ${VAR} reference"
            " - at `$.postgres.connectionString`",
        ),
        (
            {
                "name": "j",
                "type": "jira",
                "jira": {"domain": "d", "email": "e", "apiToken": "t0k3n"},
            },
            "apiToken must be a ${VAR} reference to the environment, never the secret itself"
            " - at `$.jira.apiToken`",
        ),
    ]
    for body, message in cases:
        if isinstance(body, bytes):
            resp = shared.client.post(url(gw), content=body, headers=admin)
        else:
            resp = shared.client.post(url(gw), json=body, headers=admin)
        assert_error(resp, 400, "VALIDATION_ERROR", message)
        assert "hunter2" not in resp.text and "t0k3n" not in resp.text
    assert shared.client.get(url(gw), headers=admin).json() == []


def test_only_an_admin_of_the_gateway_may_see_or_change_its_connectors(
    shared: Gateway, gw: str
) -> None:
    assert shared.client.post(url(gw), json=BODY, headers=shared.admin(gw)).status_code == 200
    other = shared.admin(gw + "x")
    for method, path in [("GET", url(gw)), ("POST", url(gw)), ("DELETE", url(gw, "shop"))]:
        resp = shared.client.request(method, path, json=BODY, headers=other)
        assert_error(
            resp, 403, "AUTH_ERROR", "Gateway ID mismatch: JWT authorises a different gateway"
        )
        resp = shared.client.request(method, path, json=BODY, headers=shared.auth("c1", gw))
        assert_error(resp, 403, "AUTH_ERROR", "Admin role required")
        assert_error(shared.client.request(method, path, json=BODY), 401, "AUTH_ERROR")
    assert [c["name"] for c in shared.client.get(url(gw), headers=shared.admin(gw)).json()] == [
        "shop"
    ]
