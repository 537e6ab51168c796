"""The Bulk API 2.0 query flow: one job, polled until complete, its CSV results paged.

``POST …/jobs/query`` creates the job (``queryAll``: deleted records too); ``GET
…/jobs/query/<id>`` is polled (every ``poll_s`` seconds, doubling up to 10 s) until
``JobComplete`` (``Failed`` or ``Aborted`` is an error naming Salesforce's reason); ``GET
…/jobs/query/<id>/results?maxRecords=<n>&locator=<l>`` hands out the rows a page at a time,
the next page's locator in the ``Sforce-Locator`` header (``null`` after the last). Only one
page of rows is held at a time.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable, Iterator

import requests

from ...core.errors import AdapterError
from ..http import fetch
from .settings import BULK_PAGE_RECORDS, SOURCE, data_path

__all__ = ["bulk_query_pages"]

_MAX_POLL_S = 10.0


def bulk_query_pages(
    session: requests.Session,
    base_url: str,
    version: str,
    soql: str,
    *,
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    page_records: int = BULK_PAGE_RECORDS,
) -> Iterator[list[dict[str, str]]]:
    """The rows of ``soql`` (as CSV text values by column) in pages."""
    jobs = base_url + data_path(version, "jobs/query")
    created = fetch(session, "POST", jobs, SOURCE, json={"operation": "queryAll", "query": soql})
    job = created.json()["id"]
    wait = poll_s
    while True:
        status = fetch(session, "GET", f"{jobs}/{job}", SOURCE)
        doc = status.json()
        state = doc.get("state")
        if state == "JobComplete":
            break
        if state in ("Failed", "Aborted"):
            raise AdapterError(
                f"{SOURCE} bulk query job {job} {state.lower()}: {doc.get('errorMessage', '')}"
            )
        sleep(wait)
        wait = min(wait * 2, _MAX_POLL_S)
    locator: str | None = None
    while True:
        params: dict[str, str | int] = {"maxRecords": page_records}
        if locator:
            params["locator"] = locator
        response = fetch(session, "GET", f"{jobs}/{job}/results", SOURCE, params=params)
        response.encoding = "utf-8"
        yield list(csv.DictReader(io.StringIO(response.text)))
        locator = response.headers.get("Sforce-Locator")
        if not locator or locator == "null":
            return
