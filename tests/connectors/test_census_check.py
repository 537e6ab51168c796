"""The asset check ``census_consistent``: the last census ran when due and found no id missing."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync_platform.connectors.model import RunReport
from lakesync_platform.core.connectors import ConnectorConfig, parse_connector_config
from lakesync_platform.pipeline.connectors import check_census

JIRA = parse_connector_config(
    {"name": "t", "type": "jira", "jira": {"domain": "a", "email": "e", "apiToken": "${T}"}}
)
SQL = ConnectorConfig("s", "postgres", {"connectionString": "postgresql://db/x"})
LAST = {"run": 12, "sourceIds": 40, "knownIds": 41, "vanished": 1, "missing": 0,
        "missingSample": [], "consistent": True}  # fmt: skip


def report(census: dict[str, Any] | None) -> RunReport:
    return RunReport("t", "gw", census=census)


@pytest.mark.parametrize(
    ("cfg", "census", "passed", "description"),
    [
        (SQL, None, True, "this connector takes no delete census"),
        (JIRA, {"every": 12, "runs": 3, "runsSince": None, "ranThisRun": False, "last": None},
         True, "first census due in 9 run(s)"),
        (JIRA, {"every": 12, "runs": 12, "runsSince": None, "ranThisRun": False, "last": None,
                "skipped": "quota reached"}, False, "the first census is overdue"),
        (JIRA, {"every": 12, "runs": 12, "runsSince": 0, "ranThisRun": True, "last": LAST},
         True, "census of run 12: 40 ids at the source, 1 vanished and deleted, none missing"),
        (JIRA, {"every": 12, "runs": 20, "runsSince": 8, "ranThisRun": False, "last": LAST},
         True, "census of run 12: 40 ids at the source, 1 vanished and deleted, none missing"),
        (JIRA, {"every": 12, "runs": 24, "runsSince": 12, "ranThisRun": False, "last": LAST},
         False, "the census is overdue: it last ran 12 runs ago"),
        (JIRA, {"every": 12, "runs": 12, "runsSince": 0, "ranThisRun": True,
                "last": {**LAST, "missing": 2, "consistent": False,
                         "missingSample": [["jira_issues", "ENG-7"], ["jira_issues", "ENG-9"]]}},
         False, "2 id(s) at the source never reached the WAL (e.g. jira_issues/ENG-7, "
                "jira_issues/ENG-9)"),
    ],
)  # fmt: skip
def test_the_census_check(
    cfg: ConnectorConfig, census: dict[str, Any] | None, passed: bool, description: str
) -> None:
    outcome = check_census(cfg, report(census))
    assert (outcome.passed, outcome.description) == (passed, description)
