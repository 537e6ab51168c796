"""Jira's and Salesforce's actions against the fake servers, dispatched by the action service
with its durable idempotency (in-memory WAL): the side effects are counted at the fake server —
an action sent again, by id or by idempotency key, reaches it once; a 5xx is retryable and the
retry creates once; the source's refusals are not retryable; registered connectors serve
their actions as they are registered and unregistered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lakesync_platform.connectors.actions import ConnectorActionHandlers
from lakesync_platform.connectors.http import HttpSettings
from lakesync_platform.core.actions import Action, ActionErrorResult, ActionResult
from lakesync_platform.core.connectors import parse_connector_config
from lakesync_platform.core.ids import action_id
from lakesync_platform.fakes.jira import FakeJira
from lakesync_platform.fakes.salesforce import FakeSalesforce
from lakesync_platform.sync.actions import ActionRegistry, ActionService
from lakesync_platform.testing import ManualClock
from lakesync_platform.wal.memory import MemoryWal

GW = "acts"
ENV = {"JIRA_TOKEN": "jira-token", "SF_SECRET": "sf-secret", "SF_PASSWORD": "sf-password"}
QUICK = HttpSettings(timeout_s=5.0, tries=2, backoff_s=0.01)


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_project("ENG")
        yield fake


@pytest.fixture
def org() -> Iterator[FakeSalesforce]:
    with FakeSalesforce() as fake:
        yield fake


def configs(jira: FakeJira, org: FakeSalesforce) -> dict[str, Any]:
    tracker = {
        "domain": "acme", "email": jira.email, "apiToken": "${JIRA_TOKEN}", "baseUrl": jira.url,
    }  # fmt: skip
    crm = {
        "instanceUrl": org.url, "loginUrl": org.url, "clientId": org.client_id,
        "clientSecret": "${SF_SECRET}", "username": org.username, "password": "${SF_PASSWORD}",
    }  # fmt: skip
    return {
        "tracker": parse_connector_config({"name": "tracker", "type": "jira", "jira": tracker}),
        "crm": parse_connector_config({"name": "crm", "type": "salesforce", "salesforce": crm}),
    }


@pytest.fixture
def registered(jira: FakeJira, org: FakeSalesforce) -> dict[str, Any]:
    return configs(jira, org)


@pytest.fixture
def service(registered: dict[str, Any]) -> Iterator[ActionService]:
    provider = ConnectorActionHandlers(lambda gw: registered, ENV, ttl_s=0, settings=QUICK)
    svc = ActionService(MemoryWal(), ActionRegistry(provider), ManualClock())
    yield svc
    svc.close()
    provider.close()


def act(
    connector: str,
    action_type: str,
    params: dict[str, Any],
    *,
    hlc: int = 1,
    key: str | None = None,
) -> Action:
    aid = action_id("alice", hlc, connector, action_type, params)
    return Action(aid, "alice", hlc, connector, action_type, params, key)


def run(service: ActionService, *actions: Action) -> list[ActionResult | ActionErrorResult]:
    return service.dispatch(GW, "alice", list(actions))


def test_discovery_lists_each_connectors_actions_with_their_params_schemas(
    service: ActionService,
) -> None:
    found = service.describe(GW)["connectors"]
    assert [a["actionType"] for a in found["tracker"]] == ["create_issue", "add_comment"]
    assert [a["actionType"] for a in found["crm"]] == ["create_record", "update_record"]
    schema = found["tracker"][0]["paramsSchema"]
    assert schema["required"] == ["projectKey", "summary"]
    assert schema["properties"]["labels"] == {
        "type": "array", "items": {"type": "string"}, "default": [],
    }  # fmt: skip
    update = found["crm"][1]["paramsSchema"]
    assert update["required"] == ["sobject", "id", "fields"]
    assert update["properties"]["id"]["pattern"] == "^[A-Za-z0-9]{15}([A-Za-z0-9]{3})?$"


def test_jira_issues_and_comments_are_created_exactly_once(
    service: ActionService, jira: FakeJira
) -> None:
    create = act("tracker", "create_issue", {"projectKey": "ENG", "summary": "From a client"})
    [first] = run(service, create)
    assert isinstance(first, ActionResult) and first.data["key"] == "ENG-1"
    [again] = run(service, create)  # the same action (a client's retry): the stored result
    assert isinstance(again, ActionResult) and again.data == first.data
    keyed = act("tracker", "add_comment", {"issueKey": "ENG-1", "body": "hi"}, key="k1")
    other = act("tracker", "add_comment", {"issueKey": "ENG-1", "body": "hi"}, hlc=2, key="k1")
    [c1], [c2] = run(service, keyed), run(service, other)  # another id, the same key
    assert isinstance(c2, ActionResult) and c1.data == c2.data  # type: ignore[union-attr]
    assert jira.count("create_issue") == 1 and jira.count("add_comment") == 1
    assert [c.body for c in jira.issues["ENG-1"].comments] == ["hi"]


def test_jira_refusals_are_not_retryable_and_outages_are(
    service: ActionService, jira: FakeJira
) -> None:
    [bad] = run(service, act("tracker", "create_issue", {"projectKey": "NOPE", "summary": "x"}))
    assert isinstance(bad, ActionErrorResult) and bad.retryable is False
    assert bad.message == "Jira answered 400: project: valid project is required"
    [gone] = run(service, act("tracker", "add_comment", {"issueKey": "ENG-9", "body": "x"}))
    assert isinstance(gone, ActionErrorResult) and gone.retryable is False
    [invalid] = run(service, act("tracker", "create_issue", {"summary": "no project"}))
    assert isinstance(invalid, ActionErrorResult) and invalid.code == "ACTION_VALIDATION_ERROR"
    assert "projectKey" in invalid.message
    jira.fail("/rest/api/3/issue", 503, method="POST")
    create = act("tracker", "create_issue", {"projectKey": "ENG", "summary": "Later"}, hlc=5)
    [down] = run(service, create)
    assert isinstance(down, ActionErrorResult) and down.retryable is True
    [up] = run(service, create)  # the retry runs the handler again: the issue exists once
    assert isinstance(up, ActionResult) and list(jira.issues) == ["ENG-1"]
    assert jira.count("fault") == 1


def test_salesforce_records_are_created_and_updated_exactly_once(
    service: ActionService, org: FakeSalesforce
) -> None:
    create = act("crm", "create_record", {"sobject": "Account", "fields": {"Name": "Acme"}})
    [made] = run(service, create)
    assert isinstance(made, ActionResult) and made.data["created"] is True
    record = str(made.data["id"])
    run(service, create)
    assert len(org.records["Account"]) == 1 and org.count("create_record") == 1
    org.expire_tokens()  # the session renews itself through the OAuth flow
    params = {"sobject": "Account", "id": record, "fields": {"Industry": "Energy"}}
    [done] = run(service, act("crm", "update_record", params, key="u1"))
    assert isinstance(done, ActionResult)
    assert done.data == {"id": record, "sobject": "Account", "updated": True}
    assert org.records["Account"][record]["Industry"] == "Energy" and org.count("token") == 2
    [missing] = run(service, act("crm", "create_record", {"sobject": "Account", "fields": {}}))
    assert isinstance(missing, ActionErrorResult) and missing.retryable is False
    assert missing.message == (
        "Salesforce answered 400: REQUIRED_FIELD_MISSING: Required fields are missing: [Name]"
    )
    org.api_limit = org.api_used  # the daily allowance is spent: it comes back tomorrow
    lead = {"sobject": "Lead", "fields": {"LastName": "L"}}
    [spent] = run(service, act("crm", "create_record", lead))
    assert isinstance(spent, ActionErrorResult) and spent.retryable is True
    assert "REQUEST_LIMIT_EXCEEDED" in spent.message


def test_registered_connectors_come_and_go_and_a_missing_secret_says_so(
    jira: FakeJira, org: FakeSalesforce
) -> None:
    registered: dict[str, Any] = {}
    provider = ConnectorActionHandlers(lambda gw: registered, {}, ttl_s=0, settings=QUICK)
    service = ActionService(MemoryWal(), ActionRegistry(provider), ManualClock())
    try:
        assert service.describe(GW) == {"connectors": {}}
        registered["tracker"] = configs(jira, org)["tracker"]
        assert list(service.describe(GW)["connectors"]) == ["tracker"]
        issue = {"projectKey": "ENG", "summary": "x"}
        [refused] = run(service, act("tracker", "create_issue", issue))
        assert isinstance(refused, ActionErrorResult) and refused.retryable is False
        assert refused.message == "Jira connector: environment variable JIRA_TOKEN is not set"
        registered.clear()
        assert service.describe(GW) == {"connectors": {}}
        assert jira.count("create_issue") == 0
    finally:
        service.close()
        provider.close()
