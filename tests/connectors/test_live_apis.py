"""The connectors against the real Jira Cloud and Salesforce APIs, read-only, into an in-memory
WAL. They need credentials in the environment and are skipped — visibly, saying which
variables are missing — without them:

* Jira: ``LIVE_JIRA_DOMAIN`` (``acme`` for acme.atlassian.net), ``LIVE_JIRA_EMAIL``,
  ``LIVE_JIRA_API_TOKEN``; optional ``LIVE_JIRA_JQL`` (default ``updated >= -7d``).
* Salesforce (password flow): ``LIVE_SF_INSTANCE_URL``, ``LIVE_SF_CLIENT_ID``,
  ``LIVE_SF_CLIENT_SECRET``, ``LIVE_SF_USERNAME``, ``LIVE_SF_PASSWORD``; optional
  ``LIVE_SF_LOGIN_URL`` (``https://test.salesforce.com`` for a sandbox).
"""

from __future__ import annotations

import os
import time

import pytest

from lakesync_platform.connectors.jira.source import JiraSource
from lakesync_platform.connectors.salesforce.auth import SalesforceSecrets
from lakesync_platform.connectors.salesforce.source import SalesforceSource
from lakesync_platform.core.connectors import (
    jira_options,
    parse_connector_config,
    salesforce_options,
)
from lakesync_platform.testing import ManualClock

from .poll_kit import FAST, Poller

pytestmark = pytest.mark.live_api


def _credentials(*names: str) -> dict[str, str]:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        pytest.skip(f"live API test skipped: set {', '.join(missing)} to run it")
    return {n: os.environ[n] for n in names}


def test_a_live_jira_site_polls_into_rows() -> None:
    env = _credentials("LIVE_JIRA_DOMAIN", "LIVE_JIRA_EMAIL", "LIVE_JIRA_API_TOKEN")
    body = {
        "domain": env["LIVE_JIRA_DOMAIN"],
        "email": env["LIVE_JIRA_EMAIL"],
        "apiToken": "${LIVE_JIRA_API_TOKEN}",
        "jql": os.environ.get("LIVE_JIRA_JQL", "updated >= -7d"),
    }
    cfg = parse_connector_config({"name": "live", "type": "jira", "jira": body})
    clock = ManualClock(time.time_ns() // 1_000_000)
    src = JiraSource(jira_options(cfg), env["LIVE_JIRA_API_TOKEN"], FAST, clock=clock)
    poller = Poller("live", clock)
    report = poller.run(src.streams())
    assert report.streams[0].api_calls >= 3  # fields, myself, a search
    for key, row in poller.rows("jira_issues").items():
        assert row["key"] == key and row["project_key"] == key.split("-")[0]
    assert poller.rows("jira_projects")  # a site has at least one project


def test_a_live_salesforce_org_polls_into_rows() -> None:
    env = _credentials(
        "LIVE_SF_INSTANCE_URL", "LIVE_SF_CLIENT_ID", "LIVE_SF_CLIENT_SECRET",
        "LIVE_SF_USERNAME", "LIVE_SF_PASSWORD",
    )  # fmt: skip
    body = {
        "instanceUrl": env["LIVE_SF_INSTANCE_URL"],
        "clientId": env["LIVE_SF_CLIENT_ID"],
        "clientSecret": "${LIVE_SF_CLIENT_SECRET}",
        "username": env["LIVE_SF_USERNAME"],
        "password": "${LIVE_SF_PASSWORD}",
        "objects": [{"name": "Account", "soqlFilter": "CreatedDate = LAST_N_DAYS:30"}],
        "quotaShare": 0.5,
        "bulkThreshold": 0,
    }
    if os.environ.get("LIVE_SF_LOGIN_URL"):
        body["loginUrl"] = os.environ["LIVE_SF_LOGIN_URL"]
    cfg = parse_connector_config({"name": "live", "type": "salesforce", "salesforce": body})
    clock = ManualClock(time.time_ns() // 1_000_000)
    secrets = SalesforceSecrets(env["LIVE_SF_CLIENT_SECRET"], env["LIVE_SF_PASSWORD"])
    src = SalesforceSource(salesforce_options(cfg), secrets, FAST, clock=clock)
    poller = Poller("live", clock)
    poller.run(src.streams())
    assert src.quota.known  # Sforce-Limit-Info was read
    for record_id, row in poller.rows("sf_accounts").items():
        assert row["sf_id"] == record_id
