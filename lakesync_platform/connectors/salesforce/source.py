"""A Salesforce poll: one stream per sObject, the census, within an API-quota budget.

Each object's stream describes the object again every run (a field added since the last run
becomes a column, added to the table's schema before rows carrying it are appended), then
reads ``queryAll`` for records whose ``SystemModstamp`` is at or after its cursor minus the
lookback, in ``SystemModstamp`` order, one page (up to 2 000 records) at a time; a record with
``IsDeleted`` becomes a delete. A page's state is its latest ``SystemModstamp``, saved once the
page is committed. A first load of an object holding more than ``bulkThreshold`` records (a
``SELECT COUNT()``) goes through the Bulk API 2.0 instead; its cursor is saved after its last
page.

Quota: every answer's ``Sforce-Limit-Info`` (``api-usage=<used>/<limit>``; ``/limits`` when
no answer carried it) is watched; once ``used`` reaches ``quotaShare`` of ``limit`` the streams
stop after the page in hand — their cursors stay where the WAL is — and the run ends as a
success that says ``quota reached``. The next run resumes from the cursors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

from ...core.connectors import SalesforceObject, SalesforceOptions, salesforce_table
from ..census import CensusDiffer, CensusStream
from ..http import SessionFactory, SourceSession, fetch
from ..model import Change, Page, QuotaReached, Stream
from .auth import SalesforceAuth, SalesforceSecrets
from .bulk import bulk_query_pages
from .records import (
    SfField,
    count_soql,
    csv_change,
    describe_fields,
    ids_soql,
    next_cursor,
    object_schema,
    parse_limit_info,
    poll_soql,
    record_change,
)
from .settings import (
    BULK_PAGE_RECORDS,
    CURSOR_FIELD,
    ID_FIELD,
    SOURCE,
    data_path,
    query_endpoint,
)

__all__ = ["ApiQuota", "SalesforceSource"]

QUOTA_REACHED = "quota reached"


@dataclass
class ApiQuota:
    """The org's daily API use as the answers report it, against a budget (a share)."""

    share: float
    used: int | None = None
    limit: int | None = None

    def observe(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        """A ``requests`` response hook: read ``Sforce-Limit-Info``."""
        found = parse_limit_info(response.headers.get("Sforce-Limit-Info"))
        if found is not None:
            self.used, self.limit = found

    @property
    def known(self) -> bool:
        """Whether an answer said how much is used."""
        return self.used is not None and self.limit is not None

    @property
    def reached(self) -> bool:
        """Whether the budget is spent."""
        if self.used is None or self.limit is None:
            return False
        return self.used >= self.share * self.limit

    def report(self) -> dict[str, Any]:
        """Run metadata: used, limit, the used share and the budget."""
        share = None
        if self.used is not None and self.limit:
            share = round(self.used / self.limit, 4)
        return {"used": self.used, "limit": self.limit, "share": share, "budget": self.share}


@dataclass
class SalesforceSource:
    """The streams of one Salesforce connector's poll. ``clock`` (epoch ms) dates the
    census's report; ``sleep`` waits between Bulk API job polls."""

    options: SalesforceOptions
    secrets: SalesforceSecrets
    make_session: SessionFactory
    clock: Callable[[], int] = lambda: 0
    sleep: Callable[[float], None] = time.sleep
    bulk_poll_s: float = 1.0
    bulk_page_records: int = BULK_PAGE_RECORDS
    quota: ApiQuota = field(init=False)
    auth: SalesforceAuth = field(init=False)
    session: SourceSession = field(init=False)
    stopped: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.quota = ApiQuota(self.options.quota_share)
        self.auth = SalesforceAuth(self.options, self.secrets)
        self.session = self.make_session(self.auth)
        self.session.hooks["response"].append(self.quota.observe)

    @property
    def base_url(self) -> str:
        """The org's API base (the token's ``instance_url``)."""
        return self.auth.instance_url

    def close(self) -> None:
        """Release the HTTP connections."""
        self.session.close()

    def get(self, tail: str, **params: Any) -> Any:
        """``GET /services/data/<version>/<tail>`` as JSON."""
        url = self.base_url + data_path(self.options.api_version, tail)
        return fetch(self.session, "GET", url, SOURCE, params=params or None).json()

    def spent(self) -> bool:
        """Whether the budget is spent (reading ``/limits`` first if no answer said yet);
        marks the run as stopped by it."""
        if not self.quota.known:
            limits = self.get("limits").get("DailyApiRequests") or {}
            if isinstance(limits.get("Max"), int) and isinstance(limits.get("Remaining"), int):
                self.quota.limit = limits["Max"]
                self.quota.used = limits["Max"] - limits["Remaining"]
        if self.quota.reached:
            self.stopped = QUOTA_REACHED
        return self.quota.reached

    def streams(self) -> list[Stream]:
        """One stream per polled sObject."""
        return [_ObjectStream(self, o) for o in self.options.polled()]

    def census_stream(self, differ: Callable[[], CensusDiffer]) -> CensusStream:
        """The census of every polled sObject (due every ``censusEvery`` runs; run it after
        :meth:`streams`), ``differ`` opening its comparison."""
        first = self.options.polled()[0]
        return CensusStream(
            first.table or salesforce_table(first.name),
            self.options.census_every,
            self.sweep,
            differ,
            lambda: self.session.calls,
            self.clock,
        )

    def sweep(self) -> Iterator[tuple[str, str]]:
        """Every ``(table, Id)`` the org holds now (``query``: not the recycle bin); raises
        :class:`QuotaReached` when the budget runs out on the way."""
        if self.stopped or self.spent():
            raise QuotaReached(QUOTA_REACHED)
        for obj in self.options.polled():
            table = obj.table or salesforce_table(obj.name)
            endpoint = query_endpoint(
                self.options.api_version, ids_soql(obj.name, obj.soql_filter), deleted=False
            )
            for records in endpoint.pages(self.session, self.base_url):
                for record in records:
                    yield table, str(record[ID_FIELD])
                if self.spent():
                    raise QuotaReached(QUOTA_REACHED)


class _ObjectStream:
    """One sObject's changes (see the module docstring)."""

    def __init__(self, source: SalesforceSource, obj: SalesforceObject) -> None:
        self.source = source
        self.obj = obj
        self.name = obj.name
        self.table = obj.table or salesforce_table(obj.name)

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """Pages of changes after the cursor (state ``{"SystemModstamp": <UTC>}``)."""
        src, opts = self.source, self.source.options
        if src.stopped or (src.quota.known and src.spent()):
            return
        calls = src.session.calls
        fields = describe_fields(src.get(f"sobjects/{self.obj.name}/describe"))
        if src.spent():
            return
        schemas = [object_schema(self.table, fields)]
        if CURSOR_FIELD not in state and opts.bulk_threshold > 0:
            count = src.get("query", q=count_soql(self.obj.name, self.obj.soql_filter))
            if int(count.get("totalSize", 0)) > opts.bulk_threshold:
                yield from self._bulk(state, fields, schemas, calls)
                return
        soql = poll_soql(self.obj.name, fields, state, opts.lookback_ms, self.obj.soql_filter)
        current: Mapping[str, Any] = state
        endpoint = query_endpoint(opts.api_version, soql, deleted=True)
        for records in endpoint.pages(src.session, src.base_url):
            changes = [record_change(r, fields) for r in records]
            current = next_cursor(current, [r.get(CURSOR_FIELD) for r in records])
            yield Page(changes, current, api_calls=src.session.calls - calls, schemas=schemas)
            calls, schemas = src.session.calls, []
            if src.spent():
                return

    def _bulk(
        self, state: Mapping[str, Any], fields: list[SfField], schemas: list[Any], calls: int
    ) -> Iterator[Page]:
        """A first load through the Bulk API 2.0 (cursor saved after the last page)."""
        src = self.source
        soql = poll_soql(self.obj.name, fields, {}, 0, self.obj.soql_filter, ordered=False)
        current: Mapping[str, Any] = state
        pages = bulk_query_pages(
            src.session,
            src.base_url,
            src.options.api_version,
            soql,
            poll_s=src.bulk_poll_s,
            sleep=src.sleep,
            page_records=src.bulk_page_records,
        )
        for rows in pages:
            changes: list[Change] = [csv_change(r, fields) for r in rows]
            current = next_cursor(current, [r.get(CURSOR_FIELD) for r in rows])
            yield Page(changes, api_calls=src.session.calls - calls, schemas=schemas)
            calls, schemas = src.session.calls, []
            if src.spent():
                return
        yield Page([], current)
