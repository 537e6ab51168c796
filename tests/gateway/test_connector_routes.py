"""The connector admin routes: register, list with secrets masked, unregister; validation as
PROTOCOL.md §11.1 with the §4.2 envelope; admin only, and only for the token's gateway."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from lakesync_platform.core.connectors import MASK
from lakesync_platform.core.ids import action_id
from lakesync_platform.fakes.jira import FakeJira

from .conftest import Gateway, GatewayFactory, assert_error

BODY: dict[str, Any] = {
    "name": "shop",
    "type": "postgres",
    "postgres": {"connectionString": "postgresql://app:${SHOP_PW}@db:5432/shop"},
    "schedule": "*/10 * * * *",
    "ingest": {
        "tables": [{"table": "items", "strategy": {"type": "cursor", "cursorColumn": "updated_at"}}]
    },
}


JIRA_BODY: dict[str, Any] = {
    "name": "tracker",
    "type": "jira",
    "jira": {"domain": "acme", "email": "bot@acme.io", "apiToken": "${JIRA_TOKEN}"},
}
SF_BODY: dict[str, Any] = {
    "name": "crm",
    "type": "salesforce",
    "salesforce": {
        "instanceUrl": "https://acme.my.salesforce.com",
        "clientId": "3MVG9",
        "clientSecret": "${SF_SECRET}",
        "username": "bot@acme.io",
        "password": "${SF_PASSWORD}",
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
        (
            {**JIRA_BODY, "jira": {**JIRA_BODY["jira"], "censusEvery": "often"}},
            "Expected `int`, got `str` - at `$.jira.censusEvery`",
        ),
        (
            {**SF_BODY, "salesforce": {**SF_BODY["salesforce"], "clientSecret": None}},
            "clientSecret must be a ${VAR} reference to the environment, never the secret itself"
            " - at `$.salesforce.clientSecret`",
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


@pytest.mark.parametrize("body", [BODY, JIRA_BODY, SF_BODY], ids=["postgres", "jira", "salesforce"])
def test_only_an_admin_of_the_gateway_may_see_or_change_its_connectors(
    shared: Gateway, gw: str, body: dict[str, Any]
) -> None:
    assert shared.client.post(url(gw), json=body, headers=shared.admin(gw)).status_code == 200
    other = shared.admin(gw + "x")
    name = body["name"]
    for method, path in [("GET", url(gw)), ("POST", url(gw)), ("DELETE", url(gw, name))]:
        resp = shared.client.request(method, path, json=body, headers=other)
        assert_error(
            resp, 403, "AUTH_ERROR", "Gateway ID mismatch: JWT authorises a different gateway"
        )
        resp = shared.client.request(method, path, json=body, headers=shared.auth("c1", gw))
        assert_error(resp, 403, "AUTH_ERROR", "Admin role required")
        assert_error(shared.client.request(method, path, json=body), 401, "AUTH_ERROR")
    listed = shared.client.get(url(gw), headers=shared.admin(gw)).json()
    assert [(c["name"], c["isPolling"]) for c in listed] == [(name, True)]


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_project("ENG")
        yield fake


def test_a_registered_jira_connector_serves_its_actions_until_unregistered(
    make_gateway: GatewayFactory, gw: str, jira: FakeJira
) -> None:
    gateway = make_gateway(env={"JIRA_TOKEN": jira.token})
    body = {**JIRA_BODY, "jira": {**JIRA_BODY["jira"], "email": jira.email, "baseUrl": jira.url}}
    assert gateway.client.post(url(gw), json=body, headers=gateway.admin(gw)).status_code == 200
    client = gateway.auth("alice", gw)
    found = gateway.client.get(f"/v1/sync/{gw}/actions", headers=client).json()
    assert [a["actionType"] for a in found["connectors"]["tracker"]] == [
        "create_issue",
        "add_comment",
    ]
    params = {"projectKey": "ENG", "summary": "From the app"}
    action = {
        "actionId": action_id("alice", 7, "tracker", "create_issue", params),
        "clientId": "alice", "hlc": "7", "connector": "tracker",
        "actionType": "create_issue", "params": params,
    }  # fmt: skip
    push = {"clientId": "alice", "actions": [action]}
    for _ in range(2):  # a retry of the same action: one issue
        resp = gateway.client.post(f"/v1/sync/{gw}/action", json=push, headers=client)
        [result] = resp.json()["results"]
        assert result["data"]["key"] == "ENG-1", result
    assert list(jira.issues) == ["ENG-1"]
    other = gateway.auth("mallory", gw + "x")
    resp = gateway.client.get(f"/v1/sync/{gw}/actions", headers=other)
    assert_error(resp, 403, "AUTH_ERROR")
    gateway.client.delete(url(gw, "tracker"), headers=gateway.admin(gw))
    time.sleep(1.1)  # the registry reads the config store at most once a second
    assert gateway.client.get(f"/v1/sync/{gw}/actions", headers=client).json() == {"connectors": {}}
