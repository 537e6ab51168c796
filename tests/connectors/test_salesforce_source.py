"""The Salesforce connector against the fake org on a real socket: the three OAuth flows and a
session expiring mid-run, ``queryAll`` paged by ``nextRecordsUrl`` with ``IsDeleted`` becoming
deletes, a custom field added between runs, 503 retried, the API-quota budget stopping a run
cleanly and the next run resuming, the Bulk API 2.0 for a large first load, and the census."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lakesync_platform.connectors.salesforce.auth import SalesforceSecrets
from lakesync_platform.connectors.salesforce.source import SalesforceSource
from lakesync_platform.core.connectors import parse_connector_config, salesforce_options
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.fakes.salesforce import FakeSalesforce
from lakesync_platform.testing import ManualClock

from .poll_kit import FAST, GW, Poller

HOUR = 3_600_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_767_000_000_000)


@pytest.fixture
def org(clock: ManualClock) -> Iterator[FakeSalesforce]:
    with FakeSalesforce(clock=clock, bulk_polls=1) as fake:
        yield fake


def source(
    org: FakeSalesforce,
    clock: ManualClock,
    secrets: SalesforceSecrets | None = None,
    **opts: Any,
) -> SalesforceSource:
    body = {
        "instanceUrl": org.url,
        "loginUrl": org.url,
        "clientId": org.client_id,
        "clientSecret": "${SF_SECRET}",
        "username": org.username,
        "password": "${SF_PASSWORD}",
        "objects": ["Account"],
        "bulkThreshold": 0,
        **opts,
    }
    cfg = parse_connector_config({"name": "crm", "type": "salesforce", "salesforce": body})
    secrets = secrets or SalesforceSecrets(org.client_secret, org.password)
    return SalesforceSource(
        salesforce_options(cfg), secrets, FAST, clock=clock, sleep=lambda _s: None,
        bulk_poll_s=0.0, bulk_page_records=1000,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flow", "secrets"),
    [
        ("password", SalesforceSecrets("sf-secret", "sf-password")),
        ("client_credentials", SalesforceSecrets("sf-secret")),
        ("refresh_token", SalesforceSecrets(refresh_token="5Aep-fake-refresh")),
    ],
)
def test_each_oauth_flow_logs_in(
    org: FakeSalesforce, clock: ManualClock, flow: str, secrets: SalesforceSecrets
) -> None:
    org.create("Account", Name="Acme")
    opts = {"refreshToken": "${SF_REFRESH}"} if flow == "refresh_token" else {}
    report = Poller("crm", clock).run(source(org, clock, secrets, authFlow=flow, **opts).streams())
    assert report.deltas == {"INSERT": 1} and org.count("token") == 1


def test_a_refused_login_is_a_clear_error(org: FakeSalesforce, clock: ManualClock) -> None:
    with pytest.raises(AdapterError) as err:
        source(org, clock, SalesforceSecrets("sf-secret", "wrong"))
    assert err.value.message == (
        "Salesforce refused the login (password flow): invalid_grant: authentication failure"
    )


def test_query_all_pages_deletes_and_a_session_expiring_mid_run(
    org: FakeSalesforce, clock: ManualClock
) -> None:
    ids = [org.create("Account", Name=f"A{i}", NumberOfEmployees=i) for i in range(2500)]
    poller = Poller("crm", clock)
    first = poller.run(source(org, clock, lookbackMs=0).streams())
    assert first.deltas == {"INSERT": 2500} and first.streams[0].pages == 2  # nextRecordsUrl
    assert poller.rows("sf_accounts")[ids[7]]["owner_name"] == "Ada Lovelace"

    clock.advance(HOUR)
    org.update("Account", ids[0], Name="Acme")
    org.delete("Account", ids[1])  # to the recycle bin: queryAll returns it, IsDeleted
    org.add_field("Account", "Tier__c", "picklist")
    org.update("Account", ids[2], Tier__c="Gold")
    src = source(org, clock, lookbackMs=0)
    org.expire_tokens()  # the session just opened ends: the next call is a 401
    org.fail("/services/data/v62.0/queryAll", 503, headers={"Retry-After": "0"})
    second = poller.run(src.streams())
    # the three changed records, and the last one of the first run again (``>=`` the cursor)
    assert second.deltas == {"UPDATE": 2, "DELETE": 1} and second.records == 4
    assert src.auth.logins == 2 and org.count("fault") == 1
    rows = poller.rows("sf_accounts")
    assert ids[1] not in rows and rows[ids[0]]["name"] == "Acme"
    assert rows[ids[2]]["tier__c"] == "Gold" and "tier__c" in poller.columns("sf_accounts")


def test_a_run_stops_at_the_quota_budget_and_the_next_one_resumes(
    org: FakeSalesforce, clock: ManualClock
) -> None:
    for i in range(5000):
        org.create("Account", Name=f"A{i}")
    org.api_limit = 6  # describe, 1st page, 2nd page: 50% spent, stop (tokens are not counted)
    poller = Poller("crm", clock)
    src = source(org, clock, quotaShare=0.5)
    stopped = poller.run(src.streams())
    assert src.stopped == "quota reached"
    assert src.quota.report() == {"used": 3, "limit": 6, "share": 0.5, "budget": 0.5}
    assert stopped.deltas == {"INSERT": 4000}  # two pages of 2 000, each committed
    cursor = stopped.streams[0].state_after
    assert poller.wal.connector_state(GW, "crm")["Account"] == cursor
    org.api_limit, org.api_used = 15_000, 0  # the next day
    resumed = poller.run(source(org, clock, quotaShare=0.5).streams())
    assert resumed.streams[0].state_before == cursor
    assert resumed.deltas == {"INSERT": 1000}  # the rest; the overlap appended nothing
    assert len(poller.rows("sf_accounts")) == 5000


def test_a_large_first_load_goes_through_the_bulk_api(
    org: FakeSalesforce, clock: ManualClock
) -> None:
    ids = [org.create("Account", Name=f"A{i}", AnnualRevenue=i * 1.5) for i in range(2500)]
    org.delete("Account", ids[3])
    poller = Poller("crm", clock)
    first = poller.run(source(org, clock, bulkThreshold=2000).streams())
    assert org.count("bulk_create") == 1 and org.count("bulk_results") == 3  # 3 pages of 1000
    assert org.count("bulk_status") == 2  # InProgress, then JobComplete
    assert first.deltas == {"INSERT": 2499}  # the deleted one is a delete of an unknown row
    assert poller.rows("sf_accounts")[ids[5]]["annual_revenue"] == 7.5
    assert first.streams[0].state_after == {"SystemModstamp": "2025-12-29T09:20:02.500+00:00"}
    clock.advance(HOUR)
    again = poller.run(source(org, clock, bulkThreshold=2000).streams())
    assert org.count("bulk_create") == 1 and again.deltas == {}  # REST from the cursor: same rows


def test_the_census_deletes_records_purged_from_the_recycle_bin(
    org: FakeSalesforce, clock: ManualClock
) -> None:
    keep = org.create("Account", Name="Keep")
    purged = org.create("Account", Name="Purged")
    poller = Poller("crm", clock)

    def run() -> Any:
        src = source(org, clock, censusEvery=1)
        return poller.run(src.streams(), src.census_stream(poller.differ()))

    assert run().census["last"]["consistent"] is True  # type: ignore[index]
    org.purge("Account", purged)  # gone for good: no query returns it any more
    report = run()
    assert report.deltas == {"DELETE": 1} and report.census["last"]["vanished"] == 1  # type: ignore[index]
    assert set(poller.rows("sf_accounts")) == {keep}
    org.api_limit = org.api_used + 4  # the next census would overrun the budget
    skipped = run()
    assert skipped.census["skipped"] == "quota reached"  # type: ignore[index]
    assert skipped.census["ranThisRun"] is False  # type: ignore[index]
