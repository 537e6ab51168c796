"""Cancel the Dagster runs of ``lakesync dev`` through its webserver, so they end CANCELED.

A run worker that is interrupted without a termination request records its run as a failure
("Execution was interrupted unexpectedly"), and a run left STARTED by a killed stack stays
"in progress" for ever. Both are avoided through Dagster's own termination path — the
webserver's GraphQL ``terminateRuns`` mutation, which calls the instance's run coordinator
(queued runs are canceled, started ones terminated by the run launcher: the run is marked
CANCELING and its worker interrupted, so it records CANCELED) and, with the policy
``MARK_AS_CANCELED_IMMEDIATELY``, reports a run that can no longer be reached as canceled.
The package never imports Dagster (``tests/test_architecture.py``): the webserver does it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

__all__ = ["IN_PROGRESS", "STARTED_STATUSES", "DagsterRuns"]

IN_PROGRESS = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
"""Run statuses that are not final."""
STARTED_STATUSES = ("STARTING", "STARTED", "CANCELING")
"""Statuses of a run that has (or had) a worker: left by a dead stack, nothing will end it."""

_RUNS = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) { ... on Runs { results { runId status } } }
}"""
_TERMINATE = """
mutation Terminate($runIds: [String!]!, $policy: TerminateRunPolicy) {
  terminateRuns(runIds: $runIds, terminatePolicy: $policy) { __typename }
}"""


class DagsterRuns:
    """The runs of one Dagster webserver (``base_url``, e.g. ``http://127.0.0.1:3000``)."""

    def __init__(self, base_url: str, timeout_s: float = 5.0) -> None:
        self.url = f"{base_url}/graphql"
        self.timeout_s = timeout_s
        self.deadline: float | None = None
        """A ``time.monotonic()`` no request may outlast (set by :meth:`cancel_in_progress`)."""

    def _graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        timeout = self.timeout_s
        if self.deadline is not None:
            timeout = min(timeout, self.deadline - time.monotonic())
            if timeout <= 0:
                raise httpx.TimeoutException("no time left to ask Dagster")
        response = httpx.post(
            self.url, json={"query": query, "variables": variables}, timeout=timeout
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        if body.get("errors"):
            raise httpx.HTTPError(f"Dagster GraphQL: {body['errors'][0].get('message')}")
        return dict(body["data"])

    def runs(self, statuses: Sequence[str], created_before: float | None = None) -> dict[str, str]:
        """``run id → status`` of the runs in ``statuses`` (created before a Unix time)."""
        run_filter: dict[str, Any] = {"statuses": list(statuses)}
        if created_before is not None:
            run_filter["createdBefore"] = created_before
        data = self._graphql(_RUNS, {"filter": run_filter})
        results = (data.get("runsOrError") or {}).get("results") or []
        return {r["runId"]: r["status"] for r in results}

    def terminate(self, run_ids: Sequence[str], *, force: bool = False) -> None:
        """Ask Dagster to terminate ``run_ids``; with ``force``, also mark them canceled at once
        (for runs whose worker is gone or does not answer)."""
        if run_ids:
            policy = "MARK_AS_CANCELED_IMMEDIATELY" if force else "SAFE_TERMINATE"
            self._graphql(_TERMINATE, {"runIds": list(run_ids), "policy": policy})

    def cancel_in_progress(self, deadline: float) -> list[str]:
        """Terminate every run in progress, leave the workers until half the time left to
        ``deadline`` (a ``time.monotonic()``) to record CANCELED, then mark the rest canceled;
        return the runs' ids. No request outlasts ``deadline``."""
        self.deadline = deadline
        run_ids = list(self.runs(IN_PROGRESS))
        self.terminate(run_ids)
        wait_until = time.monotonic() + (deadline - time.monotonic()) / 2
        left = run_ids
        while left and time.monotonic() < wait_until:
            time.sleep(0.2)
            left = [r for r in self.runs(IN_PROGRESS) if r in run_ids]
        self.terminate(left, force=True)
        return run_ids

    def cancel_leftovers(self, created_before: float) -> list[str]:
        """Mark canceled the runs a stack that is gone left started (created before this one
        started, so no worker of ours runs them); return their ids."""
        run_ids = list(self.runs(STARTED_STATUSES, created_before=created_before))
        self.terminate(run_ids, force=True)
        return run_ids
