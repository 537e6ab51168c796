"""The Jira connector against the fake Jira Cloud site on a real socket: pages by
``nextPageToken``, comments beyond those embedded, the cursor read in the user's time zone, a
custom field created between runs becoming a column, 429 and 5xx retried, a wrong token a clear
error, and the delete census (in memory here; the Spark one runs in the pipeline's tests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lakesync_platform.connectors.jira.source import JiraSource
from lakesync_platform.core.connectors import jira_options, parse_connector_config
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.fakes.jira import FakeJira
from lakesync_platform.testing import ManualClock, free_port

from .poll_kit import FAST, GW, Poller

HOUR = 3_600_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_767_000_000_000)


@pytest.fixture
def jira(clock: ManualClock) -> Iterator[FakeJira]:
    with FakeJira(clock=clock, time_zone="America/New_York") as fake:
        yield fake


def source(jira: FakeJira, clock: ManualClock, token: str | None = None, **opts: Any) -> JiraSource:
    body = {"domain": "acme", "email": jira.email, "apiToken": "${T}", "baseUrl": jira.url, **opts}
    cfg = parse_connector_config({"name": "tracker", "type": "jira", "jira": body})
    return JiraSource(jira_options(cfg), token or jira.token, FAST, clock=clock)


def test_a_first_poll_reads_everything_and_the_next_only_what_changed(
    jira: FakeJira, clock: ManualClock
) -> None:
    for i in range(150):
        jira.add_issue("OPS", f"Task {i}")
    clock.advance(HOUR)
    bug = jira.add_issue("ENG", "Crash", labels=["bug"], comments=[f"c{i}" for i in range(7)])
    poller = Poller("tracker", clock)
    first = poller.run(source(jira, clock).streams())
    assert first.deltas == {"INSERT": 151 + 7 + 2}
    issues = first.streams[0]
    assert (issues.stream, issues.pages) == ("issues", 2)  # 100 + 51 by nextPageToken
    assert jira.count("comments") == 1  # 5 comments embedded, the other 2 paged
    assert set(poller.rows("jira_comments")) == {f"{bug}:{10100 + i}" for i in range(7)}
    assert poller.rows("jira_issues")[bug]["labels"] == '["bug"]'
    assert poller.rows("jira_projects")["OPS"]["project_type"] == "software"
    assert sorted(poller.wal.schemas(GW)) == ["jira_comments", "jira_issues", "jira_projects"]
    assert issues.state_after == {"updated": "2025-12-29T10:20:00.007+00:00"}  # the latest

    clock.advance(5 * HOUR)
    jira.update_issue(bug, summary="Crash on start", status="Done")
    jira.add_comment("OPS-3", "seen")
    second = poller.run(source(jira, clock).streams())
    # only issues updated since the cursor − 1 min (read in New York time) came back, with
    # their comments: the bug (summary, status) and OPS-3 (its new comment moved `updated`)
    assert second.streams[0].records == 1 + 7 + 1 + 1
    assert second.deltas == {"UPDATE": 2, "INSERT": 1}
    assert poller.rows("jira_issues")[bug]["status"] == "Done"
    assert poller.rows("jira_comments")["OPS-3:10107"]["body"].endswith('"text":"seen"}]}]}')


def test_a_custom_field_created_between_runs_becomes_a_new_column(
    jira: FakeJira, clock: ManualClock
) -> None:
    points = jira.add_custom_field("Story Points")
    key = jira.add_issue("ENG", "Crash", custom={points: 3})
    poller = Poller("tracker", clock)
    poller.run(source(jira, clock).streams())
    assert poller.columns("jira_issues")[-1] == "story_points"
    clock.advance(HOUR)
    team = jira.add_custom_field("Team", "option")
    jira.update_issue(key, custom={team: "Blue"})
    jira.add_issue("ENG", "Other")
    report = poller.run(source(jira, clock).streams())
    assert poller.columns("jira_issues")[-2:] == ["story_points", "team"]
    assert poller.wal.schema_versions(GW)["jira_issues"] == 2  # evolved, additively
    assert poller.rows("jira_issues")[key]["team"] == "Blue"
    assert report.deltas == {"UPDATE": 1, "INSERT": 1}  # the new null column rewrote nothing


def test_rate_limits_and_server_errors_are_retried(jira: FakeJira, clock: ManualClock) -> None:
    jira.add_issue("ENG", "Crash")
    jira.fail("/rest/api/3/search/jql", 429, headers={"Retry-After": "0"})
    jira.fail("/rest/api/3/project/search", 502)
    report = Poller("tracker", clock).run(source(jira, clock).streams())
    assert report.deltas == {"INSERT": 2}
    assert jira.count("fault") == 2
    assert report.streams[0].api_calls == 4  # fields, myself, a 429, the search


def test_a_wrong_token_is_a_clear_error_and_writes_nothing(
    jira: FakeJira, clock: ManualClock
) -> None:
    jira.add_issue("ENG", "Crash")
    poller = Poller("tracker", clock)
    with pytest.raises(AdapterError) as err:
        poller.run(source(jira, clock, token="wrong").streams())
    assert err.value.message == (
        "Jira answered 401 to GET /rest/api/3/field: "
        "Client must be authenticated to access this resource."
    )
    assert poller.wal.read_entries(GW, 0) == [] and poller.wal.connector_state(GW, "tracker") == {}
    closed = source(jira, clock, baseUrl=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(AdapterError) as err:
        poller.run(closed.streams())
    assert err.value.message == "Jira unreachable on GET /rest/api/3/field: ConnectionError"


def test_the_census_deletes_what_vanished_and_reports_what_polls_missed(
    jira: FakeJira, clock: ManualClock
) -> None:
    keep = jira.add_issue("ENG", "Keep", comments=["a", "b"])
    gone = jira.add_issue("ENG", "Gone", comments=["c"])
    jira.add_issue("OLD", "In a project that will go")
    poller = Poller("tracker", clock)

    def run() -> Any:
        src = source(jira, clock, censusEvery=2)
        return poller.run(src.streams(), src.census_stream(poller.differ()))

    first = run()
    assert first.census == {
        "ranThisRun": False, "every": 2, "runsSince": None, "runs": 1, "last": None,
    }  # fmt: skip
    second = run()
    assert second.census is not None and second.census["ranThisRun"] is True
    assert second.census["last"]["consistent"] and second.census["last"]["sourceIds"] == 8

    clock.advance(HOUR)
    jira.delete_issue(gone)
    jira.delete_comment(keep, "10100")
    jira.delete_project("OLD")
    missed = jira.add_issue("ENG", "Imported", at=1_700_000_000_000)  # before the cursor
    assert run().census["ranThisRun"] is False  # type: ignore[index]
    fourth = run()
    last = fourth.census["last"]  # type: ignore[index]
    assert fourth.deltas == {"DELETE": 5}  # an issue, its comment, a comment, a project, its issue
    assert (last["vanished"], last["missing"], last["consistent"]) == (5, 1, False)
    assert last["missingSample"] == [["jira_issues", missed]]
    assert set(poller.rows("jira_issues")) == {keep}
    assert set(poller.rows("jira_comments")) == {f"{keep}:10101"}
    assert set(poller.rows("jira_projects")) == {"ENG"}
    assert poller.wal.connector_state(GW, "tracker")["census"]["lastCensusRun"] == 4
