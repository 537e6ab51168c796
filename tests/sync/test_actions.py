"""The action service: registry lookups, params checks, stored results, timeouts, retention.

The handlers here are small connectors of the test's own (what a connector implements); the
WAL is the in-memory twin and the SQLite one. End to end over HTTP, against real external
systems and across gateway processes: ``tests/gateway/test_actions.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.core.actions import (
    Action,
    ActionContext,
    ActionDescriptor,
    ActionErrorResult,
    ActionResult,
    ParamSpec,
    params_struct,
)
from lakesync_platform.core.errors import ActionError
from lakesync_platform.core.ids import action_id
from lakesync_platform.core.wal import WalStore
from lakesync_platform.sync.actions import ActionRegistry, ActionService
from lakesync_platform.testing import ManualClock
from lakesync_platform.wal.memory import MemoryWal
from lakesync_platform.wal.store import WriteAheadLog

GW = "acts"
NOTE = ActionDescriptor(
    "note",
    "Write a note",
    params_struct("notes.note", {"text": ParamSpec("string"), "n": ParamSpec("integer", False)}),
)


class Notes:
    """A connector that appends notes to a list, or fails as told by the note's text."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.failures: list[ActionError | Exception] = []

    @property
    def descriptors(self) -> Sequence[ActionDescriptor]:
        return (NOTE, ActionDescriptor("free", "Anything goes"))

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        self.gate.wait(30)
        self.calls.append(action.action_id)
        if self.failures:
            raise self.failures.pop(0)
        return {"saved": action.params.get("text"), "by": context.client_id}


def make_action(
    text: object = "hi",
    *,
    hlc: int = 1,
    client: str = "c1",
    key: str | None = None,
    connector: str = "notes",
    action_type: str = "note",
) -> Action:
    params = {"text": text}
    aid = action_id(client, hlc, connector, action_type, params)
    return Action(aid, client, hlc, connector, action_type, params, key)


@pytest.fixture(params=["memory", "sqlite"])
def wal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WalStore]:
    store: WalStore = (
        MemoryWal()
        if request.param == "memory"
        else WriteAheadLog.open(f"sqlite:///{tmp_path / 'wal.db'}")
    )
    yield store
    store.close()


@pytest.fixture
def notes() -> Notes:
    return Notes()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def service(wal: WalStore, notes: Notes, clock: ManualClock) -> Iterator[ActionService]:
    registry = ActionRegistry()
    registry.register(GW, "notes", notes)
    svc = ActionService(wal, registry, clock, timeout_s=0.5, lease_s=5, retention_s=60)
    yield svc
    notes.gate.set()
    svc.close()


def test_an_action_runs_once_and_its_result_is_replayed(
    service: ActionService, notes: Notes
) -> None:
    action = make_action(key="k1")
    [first] = service.dispatch(GW, "c1", [action])
    assert isinstance(first, ActionResult)
    assert first.data == {"saved": "hi", "by": "c1"}
    assert service.dispatch(GW, "c1", [action]) == [first]
    # Another action with the same idempotency key gets the stored result, under its own id.
    other = make_action("other", hlc=2, key="k1")
    [replayed] = service.dispatch(GW, "c1", [other])
    assert replayed == ActionResult(other.action_id, first.data, first.server_hlc)
    assert notes.calls == [action.action_id]
    # An empty key is no key (as in the reference): the action runs.
    service.dispatch(GW, "c1", [make_action("third", hlc=3, key="")])
    assert len(notes.calls) == 2


def test_registry_lookups_and_params_checks_are_not_stored(
    service: ActionService, notes: Notes
) -> None:
    unknown = make_action(connector="jira")
    bad_type = make_action(action_type="delete_all")
    bad_params = make_action(text=5)
    results = service.dispatch(GW, "c1", [unknown, bad_type, bad_params])
    assert [r.to_json() for r in results] == [
        {
            "actionId": unknown.action_id,
            "code": "ACTION_NOT_SUPPORTED",
            "message": 'No action handler registered for connector "jira"',
            "retryable": False,
        },
        {
            "actionId": bad_type.action_id,
            "code": "ACTION_NOT_SUPPORTED",
            "message": 'Action type "delete_all" not supported by connector "notes"',
            "retryable": False,
        },
        {
            "actionId": bad_params.action_id,
            "code": "ACTION_VALIDATION_ERROR",
            "message": "Invalid params for note: Expected `str`, got `int` - at `$.params.text`",
            "retryable": False,
        },
    ]
    assert notes.calls == []
    # A type without a params schema takes any object.
    [free] = service.dispatch(GW, "c1", [make_action(5, action_type="free")])
    assert isinstance(free, ActionResult)


def test_retryable_failures_are_retried_and_others_stored(
    service: ActionService, notes: Notes
) -> None:
    flaky = make_action("flaky")
    notes.failures = [ActionError("busy", retryable=True)]
    [first] = service.dispatch(GW, "c1", [flaky])
    assert first == ActionErrorResult(flaky.action_id, "ACTION_EXECUTION_ERROR", "busy", True)
    [second] = service.dispatch(GW, "c1", [flaky])
    assert isinstance(second, ActionResult)
    assert notes.calls == [flaky.action_id] * 2

    broken = make_action("broken", hlc=2)
    notes.failures = [ActionError("no such project"), RuntimeError("never raised")]
    [failed] = service.dispatch(GW, "c1", [broken])
    assert service.dispatch(GW, "c1", [broken]) == [failed]
    assert not failed.retryable  # type: ignore[union-attr]

    buggy = make_action("buggy", hlc=3)
    notes.failures = [KeyError("x")]
    [crashed] = service.dispatch(GW, "c1", [buggy])
    assert crashed.to_json()["message"] == "Action handler failed: KeyError: 'x'"
    assert service.dispatch(GW, "c1", [buggy]) == [crashed]
    assert notes.calls.count(broken.action_id) == 1 and notes.calls.count(buggy.action_id) == 1


def test_a_slow_handler_times_out_then_its_result_is_replayed(
    service: ActionService, notes: Notes
) -> None:
    action = make_action("slow")
    notes.gate.clear()
    [late] = service.dispatch(GW, "c1", [action])
    assert late.to_json()["code"] == "ACTION_TIMEOUT" and late.to_json()["retryable"]
    # While it runs, a retry waits for it, then answers that it is still in progress.
    [waiting] = service.dispatch(GW, "c1", [action])
    assert waiting.to_json()["code"] == "ACTION_IN_PROGRESS"
    notes.gate.set()
    with ThreadPoolExecutor(1) as pool:  # the retry that comes after it finished
        [done] = pool.submit(service.dispatch, GW, "c1", [action]).result()
    assert isinstance(done, ActionResult) and done.data["saved"] == "slow"
    assert notes.calls == [action.action_id]


def test_concurrent_duplicates_run_once(service: ActionService, notes: Notes) -> None:
    action = make_action("dup", key="once")
    notes.gate.clear()
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(service.dispatch, GW, "c1", [action]) for _ in range(6)]
        threading.Timer(0.1, notes.gate.set).start()
        results = [f.result()[0] for f in futures]
    assert notes.calls == [action.action_id]
    assert all(isinstance(r, ActionResult) for r in results)
    assert len({r.server_hlc for r in results}) == 1  # type: ignore[union-attr]


def test_results_are_scoped_to_the_client(service: ActionService, notes: Notes) -> None:
    mine = make_action(key="shared")
    theirs = make_action(client="c2", key="shared")
    service.dispatch(GW, "c1", [mine])
    [other] = service.dispatch(GW, "c2", [theirs])
    assert other.to_json()["data"]["by"] == "c2"  # type: ignore[index]
    assert len(notes.calls) == 2


def test_results_expire_after_the_retention(
    wal: WalStore, notes: Notes, clock: ManualClock
) -> None:
    registry = ActionRegistry()
    registry.register(GW, "notes", notes)
    elapsed = [0.0]  # the service's monotonic clock, moved with the wall clock

    def advance(ms: int) -> None:
        clock.advance(ms)
        elapsed[0] += ms / 1000

    service = ActionService(
        wal, registry, clock, timeout_s=1, lease_s=5, retention_s=60, monotonic=lambda: elapsed[0]
    )
    try:
        action = make_action()
        service.dispatch(GW, "c1", [action])
        advance(30_000)  # not a minute since the last purge: none
        service.dispatch(GW, "c1", [action])
        assert len(notes.calls) == 1
        advance(61_000)  # purged on this dispatch: kept 60 s, written 91 s ago
        service.dispatch(GW, "c1", [action])
        assert len(notes.calls) == 2
    finally:
        service.close()


def test_describe_lists_connectors_with_params_schemas(service: ActionService) -> None:
    assert service.describe(GW) == {
        "connectors": {
            "notes": [
                {
                    "actionType": "note",
                    "description": "Write a note",
                    "paramsSchema": {
                        "title": "notes.note",
                        "type": "object",
                        "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
                        "required": ["text"],
                        "additionalProperties": False,
                    },
                },
                {"actionType": "free", "description": "Anything goes"},
            ]
        }
    }
    assert service.describe("elsewhere") == {"connectors": {}}


def test_the_lease_must_outlast_the_timeout(wal: WalStore) -> None:
    with pytest.raises(ValueError, match="lease"):
        ActionService(wal, ActionRegistry(), lambda: 0, timeout_s=10, lease_s=10)
