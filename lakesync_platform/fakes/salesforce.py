"""A fake Salesforce org: the REST API's recorded shapes over records a test changes.

Answered (API version ``v62.0`` or any other ``vNN.N``):

* ``POST /services/oauth2/token`` — the ``password``, ``client_credentials`` and
  ``refresh_token`` grants (a form), answering ``{access_token, instance_url, …}`` or
  ``400 {"error", "error_description"}``. :meth:`FakeSalesforce.expire_tokens` ends every
  session: the next call is ``401 INVALID_SESSION_ID``.
* ``GET …/sobjects/{name}/describe``, ``GET …/limits`` (``DailyApiRequests``).
* ``GET …/query`` and ``…/queryAll`` (``?q=`` SOQL: ``SELECT f, Rel.Name, … FROM Obj [WHERE
  a op literal [AND …]] [ORDER BY f ASC, …] [LIMIT n]`` or ``SELECT COUNT() …``), 2 000 records
  a batch and ``nextRecordsUrl`` (a server-side snapshot, as Salesforce's query locators);
  ``queryAll`` also returns deleted records with ``IsDeleted: true``; a purged record is gone.
* the Bulk API 2.0 query flow: ``POST …/jobs/query``, ``GET …/jobs/query/{id}`` (``InProgress``
  for :attr:`FakeSalesforce.bulk_polls` polls, then ``JobComplete``), ``GET
  …/jobs/query/{id}/results`` (CSV, ``Sforce-Locator``, ``Sforce-NumberOfRecords``).
* ``POST …/sobjects/{name}`` and ``PATCH …/sobjects/{name}/{id}`` (what the actions call), with
  Salesforce's ``[{"message", "errorCode"}]`` errors.

Every API call (not the token endpoint) counts against a daily allowance, reported in the
``Sforce-Limit-Info: api-usage=<used>/<limit>`` header; past it calls are refused with
``REQUEST_LIMIT_EXCEEDED``.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .server import FakeServer, Reply, Request, Route, Stamps, json_reply
from .soql import parse_soql

__all__ = ["FakeSalesforce", "sf_time"]

_V = r"/services/data/(?P<v>v\d+\.\d+)"
_BATCH = 2000
_PREFIXES = {"Account": "001", "Contact": "003", "Opportunity": "006", "Lead": "00Q"}


def sf_time(ms: int, *, bulk: bool = False) -> str:
    """An epoch-millisecond time as Salesforce writes it (REST ``…000+0000``, Bulk ``…000Z``)."""
    at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}" + ("Z" if bulk else "+0000")


def _f(
    name: str, type_: str, *, compound: str | None = None, rel: str | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "label": name,
        "compoundFieldName": compound,
        "relationshipName": rel,
        "referenceTo": [rel] if rel else [],
        "nillable": type_ not in ("id", "boolean"),
        "custom": name.endswith("__c"),
    }


_AUDIT = [
    _f("OwnerId", "reference", rel="Owner"),
    _f("CreatedDate", "datetime"),
    _f("LastModifiedDate", "datetime"),
    _f("SystemModstamp", "datetime"),
]
_DESCRIBE: dict[str, list[dict[str, Any]]] = {
    "Account": [
        _f("Id", "id"), _f("IsDeleted", "boolean"), _f("Name", "string"),
        _f("Type", "picklist"), _f("Industry", "picklist"), _f("Website", "url"),
        _f("Phone", "phone"), _f("BillingStreet", "textarea", compound="BillingAddress"),
        _f("BillingCity", "string", compound="BillingAddress"),
        _f("BillingState", "string", compound="BillingAddress"),
        _f("BillingCountry", "string", compound="BillingAddress"),
        _f("BillingAddress", "address"), _f("AnnualRevenue", "currency"),
        _f("NumberOfEmployees", "int"), *_AUDIT,
    ],
    "Contact": [
        _f("Id", "id"), _f("IsDeleted", "boolean"), _f("FirstName", "string"),
        _f("LastName", "string"), _f("Email", "email"), _f("Phone", "phone"),
        _f("Title", "string"), _f("AccountId", "reference", rel="Account"),
        _f("MailingCity", "string", compound="MailingAddress"),
        _f("MailingState", "string", compound="MailingAddress"),
        _f("MailingCountry", "string", compound="MailingAddress"),
        _f("MailingAddress", "address"), *_AUDIT,
    ],
    "Opportunity": [
        _f("Id", "id"), _f("IsDeleted", "boolean"), _f("Name", "string"),
        _f("StageName", "picklist"), _f("Amount", "currency"), _f("CloseDate", "date"),
        _f("Probability", "percent"), _f("AccountId", "reference", rel="Account"),
        _f("Type", "picklist"), _f("LeadSource", "picklist"), _f("IsClosed", "boolean"),
        _f("IsWon", "boolean"), *_AUDIT,
    ],
    "Lead": [
        _f("Id", "id"), _f("IsDeleted", "boolean"), _f("FirstName", "string"),
        _f("LastName", "string"), _f("Company", "string"), _f("Email", "email"),
        _f("Phone", "phone"), _f("Title", "string"), _f("Status", "picklist"),
        _f("LeadSource", "picklist"), _f("IsConverted", "boolean"),
        _f("ConvertedAccountId", "reference", rel="ConvertedAccount"),
        _f("ConvertedContactId", "reference", rel="ConvertedContact"),
        _f("ConvertedOpportunityId", "reference", rel="ConvertedOpportunity"), *_AUDIT,
    ],
}  # fmt: skip
_REQUIRED = {"Account": "Name", "Contact": "LastName", "Opportunity": "Name", "Lead": "LastName"}


def _error(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **more: Any
) -> Reply:
    """Salesforce's error shape: ``[{"message", "errorCode", …}]``."""
    return json_reply(status, [{"message": message, "errorCode": code, **more}], headers)


def _oauth_error(error: str, description: str) -> Reply:
    """The token endpoint's error shape."""
    return json_reply(400, {"error": error, "error_description": description})


@dataclass(frozen=True, slots=True)
class _Result:
    """A query's records as of the query (what a query locator pages through)."""

    sobject: str
    fields: list[str]
    rows: list[dict[str, Any]]


@dataclass
class _Job:
    query: str
    operation: str
    polls_left: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)
    state: str = "UploadComplete"


class FakeSalesforce(FakeServer):
    """A Salesforce org (see the module docstring). Credentials: ``client_id`` with
    ``client_secret``, ``username``/``password`` for the password grant, ``refresh_token``
    for the refresh grant. ``api_limit`` is the daily allowance, ``api_used`` what is spent."""

    name = "salesforce"

    def __init__(
        self,
        *,
        client_id: str = "3MVG9-fake-client",
        client_secret: str = "sf-secret",
        username: str = "bot@example.com",
        password: str = "sf-password",
        refresh_token: str = "5Aep-fake-refresh",
        api_limit: int = 15_000,
        clock: Callable[[], int] | None = None,
        bulk_polls: int = 1,
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.client_id = client_id
        self.client_secret = client_secret
        self.username = username
        self.password = password
        self.refresh_token = refresh_token
        self.api_limit = api_limit
        self.api_used = 0
        self.bulk_polls = bulk_polls
        self.stamp = Stamps(clock)
        self.describes = {k: [dict(f) for f in v] for k, v in _DESCRIBE.items()}
        self.records: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in _DESCRIBE}
        self.owners = {"005000000000001AAA": "Ada Lovelace", "005000000000002AAA": "Grace Hopper"}
        self.tokens: set[str] = set()
        self.jobs: dict[str, _Job] = {}
        self._locators: dict[str, tuple[_Result, int]] = {}
        self._counter = itertools.count(1)

    # ------------------------------------------------------------------ changes a test makes

    def add_object(self, name: str, fields: Mapping[str, str]) -> None:
        """Create a custom object with ``fields`` (name → describe type) besides the id,
        ``IsDeleted`` and the audit fields."""
        with self.lock:
            self.describes[name] = [
                _f("Id", "id"), _f("IsDeleted", "boolean"),
                *(_f(n, t) for n, t in fields.items()), *_AUDIT,
            ]  # fmt: skip
            self.records[name] = {}

    def add_field(self, sobject: str, name: str, type_: str = "string") -> None:
        """Add a (custom) field to an object's describe."""
        with self.lock:
            self.describes[sobject].insert(-4, _f(name, type_))
            for record in self.records[sobject].values():
                record.setdefault(name, None)

    def create(self, sobject: str, **values: Any) -> str:
        """Create a record; returns its 18-character id."""
        with self.lock:
            prefix = _PREFIXES.get(sobject, "a0" + str(len(sobject) % 10))
            record_id = f"{prefix}{next(self._counter):012d}AAA"
            now = self.stamp()
            record: dict[str, Any] = {f["name"]: None for f in self.describes[sobject]}
            record.update(
                Id=record_id,
                IsDeleted=False,
                OwnerId=next(iter(self.owners)),
                CreatedDate=now,
                LastModifiedDate=now,
                SystemModstamp=now,
            )
            for key, value in values.items():
                if key not in record:
                    raise KeyError(f"No such column '{key}' on sobject of type {sobject}")
                record[key] = value
            self.records[sobject][record_id] = record
            return record_id

    def update(self, sobject: str, record_id: str, **values: Any) -> None:
        """Change a record's fields; ``LastModifiedDate`` and ``SystemModstamp`` move."""
        with self.lock:
            record = self.records[sobject][record_id]
            for key, value in values.items():
                if key not in record:
                    raise KeyError(f"No such column '{key}' on sobject of type {sobject}")
                record[key] = value
            record["LastModifiedDate"] = record["SystemModstamp"] = self.stamp()

    def delete(self, sobject: str, record_id: str) -> None:
        """Delete a record to the recycle bin: ``queryAll`` returns it with ``IsDeleted``."""
        with self.lock:
            record = self.records[sobject][record_id]
            record["IsDeleted"] = True
            record["SystemModstamp"] = self.stamp()

    def purge(self, sobject: str, record_id: str) -> None:
        """Delete a record for good (emptied from the recycle bin): no query returns it."""
        with self.lock:
            del self.records[sobject][record_id]

    def expire_tokens(self) -> None:
        """End every session: the next API call answers ``401 INVALID_SESSION_ID``."""
        with self.lock:
            self.tokens.clear()

    def generate(self, per_object: int) -> None:
        """``per_object`` accounts, contacts, opportunities and leads (benchmarks)."""
        for i in range(per_object):
            account = self.create(
                "Account", Name=f"Account {i}", Type="Customer", BillingCity="Berlin",
                AnnualRevenue=1000.0 * i, NumberOfEmployees=i % 500,
            )  # fmt: skip
            self.create("Contact", LastName=f"Contact {i}", AccountId=account, Email=f"c{i}@x.io")
            self.create("Opportunity", Name=f"Deal {i}", StageName="Prospecting",
                        Amount=10.0 * i, AccountId=account, IsWon=False)  # fmt: skip
            self.create("Lead", LastName=f"Lead {i}", Company=f"Co {i}", IsConverted=False)

    # ------------------------------------------------------------------ routing

    def routes(self) -> list[Route]:
        """The API's routes."""
        r = self.route
        return [
            r("POST", r"/services/oauth2/token", "token", self._token),
            r("GET", rf"{_V}/limits/?", "limits", self._limits),
            r("GET", rf"{_V}/sobjects/(?P<obj>\w+)/describe/?", "describe", self._describe),
            r("GET", rf"{_V}/(?P<kind>query|queryAll)/?", "query", self._query),
            r("GET", rf"{_V}/(?:query|queryAll)/(?P<loc>[\w-]+)", "query_more", self._more),
            r("POST", rf"{_V}/jobs/query/?", "bulk_create", self._bulk_create),
            r("GET", rf"{_V}/jobs/query/(?P<id>\w+)/results", "bulk_results", self._bulk_rows),
            r("GET", rf"{_V}/jobs/query/(?P<id>\w+)", "bulk_status", self._bulk_status),
            r("POST", rf"{_V}/sobjects/(?P<obj>\w+)/?", "create_record", self._create),
            r("PATCH", rf"{_V}/sobjects/(?P<obj>\w+)/(?P<id>\w+)", "update_record", self._update),
        ]

    def authorised(self, request: Request) -> Reply | None:
        """The token endpoint is open; the API needs a live session and allowance left."""
        if request.path == "/services/oauth2/token":
            return None
        auth = request.headers.get("Authorization", "")
        with self.lock:
            if not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
                return _error(401, "INVALID_SESSION_ID", "Session expired or invalid")
            self.api_used += 1
            if self.api_used > self.api_limit:
                return _error(
                    403,
                    "REQUEST_LIMIT_EXCEEDED",
                    "TotalRequests Limit exceeded.",
                    self._limit_header(),
                )
        return None

    def decorate(self, request: Request, route: Route, reply: Reply) -> Reply:
        """Every API answer says how much of the daily allowance is spent."""
        if route.name == "token":
            return reply
        return Reply(
            reply.status, reply.body, reply.content_type, {**reply.headers, **self._limit_header()}
        )

    def _limit_header(self) -> dict[str, str]:
        return {"Sforce-Limit-Info": f"api-usage={self.api_used}/{self.api_limit}"}

    def _token(self, request: Request) -> Reply:
        form = request.form()
        grant = form.get("grant_type")
        if form.get("client_id") != self.client_id:
            return _oauth_error("invalid_client_id", "client identifier invalid")
        if grant == "password":
            ok = (form.get("client_secret"), form.get("username"), form.get("password")) == (
                self.client_secret, self.username, self.password,
            )  # fmt: skip
        elif grant == "client_credentials":
            ok = form.get("client_secret") == self.client_secret
        elif grant == "refresh_token":
            ok = form.get("refresh_token") == self.refresh_token
        else:
            return _oauth_error("unsupported_grant_type", "grant type not supported")
        if not ok:
            return _oauth_error("invalid_grant", "authentication failure")
        token = f"00D000000000001!AQ{next(self._counter):08d}"
        with self.lock:
            self.tokens.add(token)
        return json_reply(
            200,
            {
                "access_token": token,
                "instance_url": self.url,
                "id": f"{self.url}/id/00D000000000001EAA/005000000000001AAA",
                "token_type": "Bearer",
                "issued_at": str(self.stamp()),
                "signature": "fake-signature",
            },
        )

    def _limits(self, _request: Request) -> Reply:
        with self.lock:
            remaining = max(self.api_limit - self.api_used, 0)
            return json_reply(
                200, {"DailyApiRequests": {"Max": self.api_limit, "Remaining": remaining}}
            )

    def _describe(self, request: Request) -> Reply:
        obj = request.match["obj"]
        with self.lock:
            fields = self.describes.get(obj)
            if fields is None:
                return _error(404, "NOT_FOUND", f"The requested resource does not exist: {obj}")
            return json_reply(200, {"name": obj, "label": obj, "fields": [dict(f) for f in fields]})

    # ------------------------------------------------------------------ SOQL

    def _select(self, soql: str, include_deleted: bool) -> tuple[list[str], list[dict[str, Any]]]:
        """The fields and matching records of a SOQL query (raises ValueError)."""
        parsed = parse_soql(soql)
        with self.lock:
            records = self.records.get(parsed.sobject)
            if records is None:
                raise ValueError(f"sObject type '{parsed.sobject}' is not supported.")
            known = {f["name"] for f in self.describes[parsed.sobject]}
            for name in parsed.fields:
                if name != "COUNT()" and name.split(".")[0] not in known | {"Owner", "Account"}:
                    raise ValueError(f"No such column '{name}' on entity '{parsed.sobject}'.")
            rows = [
                r for r in records.values()
                if (include_deleted or not r["IsDeleted"]) and all(c(r) for c in parsed.where)
            ]  # fmt: skip
        for key in reversed(parsed.order):
            rows.sort(key=_sort_key(key))
        if parsed.limit is not None:
            rows = rows[: parsed.limit]
        return parsed.fields, rows

    def _rest_record(
        self, sobject: str, record: dict[str, Any], fields: list[str]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attributes": {
                "type": sobject,
                "url": f"/services/data/v62.0/sobjects/{sobject}/{record['Id']}",
            }
        }
        for name in fields:
            if "." in name:
                rel, sub = name.split(".", 1)
                value = self._related(record, rel)
                out[rel] = None if value is None else {"attributes": {"type": rel}, sub: value}
            else:
                value = record.get(name)
                if name in ("CreatedDate", "LastModifiedDate", "SystemModstamp") and value:
                    value = sf_time(value)
                out[name] = value
        return out

    def _related(self, record: Mapping[str, Any], rel: str) -> Any:
        if rel == "Owner":
            return self.owners.get(record.get("OwnerId") or "")
        if rel == "Account":
            account = self.records["Account"].get(record.get("AccountId") or "")
            return None if account is None else account["Name"]
        return None

    def _query(self, request: Request) -> Reply:
        soql = request.query.get("q", "")
        try:
            fields, rows = self._select(soql, request.match["kind"] == "queryAll")
        except ValueError as exc:
            return _error(400, "MALFORMED_QUERY", str(exc))
        sobject = parse_soql(soql).sobject
        if fields == ["COUNT()"]:
            return json_reply(200, {"totalSize": len(rows), "done": True, "records": []})
        snapshot = [dict(r) for r in rows]  # the result as of the query, as a query locator
        return self._batch(request.match["v"], _Result(sobject, fields, snapshot), 0)

    def _batch(self, version: str, result: _Result, start: int) -> Reply:
        end = start + _BATCH
        page = result.rows[start:end]
        with self.lock:
            docs = [self._rest_record(result.sobject, r, result.fields) for r in page]
        out: dict[str, Any] = {
            "totalSize": len(result.rows),
            "done": end >= len(result.rows),
            "records": docs,
        }
        if end < len(result.rows):
            locator = f"01g{next(self._counter):015d}-{end}"
            with self.lock:
                self._locators[locator] = (result, end)
            out["nextRecordsUrl"] = f"/services/data/{version}/query/{locator}"
        return json_reply(200, out)

    def _more(self, request: Request) -> Reply:
        with self.lock:
            found = self._locators.pop(request.match["loc"], None)
        if found is None:
            return _error(400, "INVALID_QUERY_LOCATOR", "invalid query locator")
        result, start = found
        return self._batch(request.match["v"], result, start)

    # ------------------------------------------------------------------ Bulk API 2.0

    def _bulk_create(self, request: Request) -> Reply:
        body = request.json() or {}
        operation = body.get("operation")
        if operation not in ("query", "queryAll"):
            return _error(400, "INVALIDJOB", "operation must be query or queryAll")
        try:
            fields, rows = self._select(str(body.get("query", "")), operation == "queryAll")
        except ValueError as exc:
            return json_reply(400, [{"errorCode": "INVALIDJOB", "message": str(exc)}])
        job_id = f"750{next(self._counter):015d}"
        sobject = parse_soql(str(body["query"])).sobject
        flat = [self._csv_row(sobject, r, fields) for r in rows]
        with self.lock:
            self.jobs[job_id] = _Job(body["query"], operation, self.bulk_polls, flat, fields)
        return json_reply(200, self._job_json(job_id))

    def _job_json(self, job_id: str) -> dict[str, Any]:
        job = self.jobs[job_id]
        return {
            "id": job_id,
            "operation": job.operation,
            "object": parse_soql(job.query).sobject,
            "state": job.state,
            "concurrencyMode": "Parallel",
            "contentType": "CSV",
            "apiVersion": 62.0,
            "lineEnding": "LF",
            "columnDelimiter": "COMMA",
            "numberRecordsProcessed": len(job.rows) if job.state == "JobComplete" else 0,
        }

    def _bulk_status(self, request: Request) -> Reply:
        with self.lock:
            job = self.jobs.get(request.match["id"])
            if job is None:
                return _error(404, "NOT_FOUND", "job not found")
            if job.polls_left > 0:
                job.polls_left -= 1
                job.state = "InProgress"
            else:
                job.state = "JobComplete"
            return json_reply(200, self._job_json(request.match["id"]))

    def _csv_row(self, sobject: str, record: dict[str, Any], fields: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in fields:
            if "." in name:
                out[name] = self._related(record, name.split(".", 1)[0])
            else:
                value = record.get(name)
                if name in ("CreatedDate", "LastModifiedDate", "SystemModstamp") and value:
                    value = sf_time(value, bulk=True)
                out[name] = value
        return out

    def _bulk_rows(self, request: Request) -> Reply:
        with self.lock:
            job = self.jobs.get(request.match["id"])
        if job is None or job.state != "JobComplete":
            return _error(400, "INVALIDJOB", "job is not complete")
        limit = int(request.query.get("maxRecords", 50_000))
        locator = request.query.get("locator")
        start = int(base64.b64decode(locator)) if locator else 0
        rows = job.rows[start : start + limit]
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(job.fields)
        for row in rows:
            writer.writerow([_csv_value(row[f]) for f in job.fields])
        end = start + limit
        nxt = base64.b64encode(str(end).encode()).decode() if end < len(job.rows) else "null"
        return Reply(
            200,
            text.getvalue().encode(),
            "text/csv",
            {"Sforce-Locator": nxt, "Sforce-NumberOfRecords": str(len(rows))},
        )

    # ------------------------------------------------------------------ writes

    def _create(self, request: Request) -> Reply:
        obj = request.match["obj"]
        values = request.json() or {}
        if obj not in self.records:
            return _error(404, "NOT_FOUND", f"The requested resource does not exist: {obj}")
        required = _REQUIRED.get(obj)
        if required and not values.get(required):
            message = f"Required fields are missing: [{required}]"
            return _error(400, "REQUIRED_FIELD_MISSING", message, fields=[required])
        try:
            record_id = self.create(obj, **values)
        except KeyError as exc:
            return _error(400, "INVALID_FIELD", exc.args[0])
        return json_reply(201, {"id": record_id, "success": True, "errors": []})

    def _update(self, request: Request) -> Reply:
        obj, record_id = request.match["obj"], request.match["id"]
        with self.lock:
            found = record_id in self.records.get(obj, {})
        if not found:
            return _error(404, "NOT_FOUND", "The requested resource does not exist")
        try:
            self.update(obj, record_id, **(request.json() or {}))
        except KeyError as exc:
            return _error(400, "INVALID_FIELD", exc.args[0])
        return Reply(204)


def _sort_key(name: str) -> Callable[[dict[str, Any]], tuple[bool, Any]]:
    return lambda record: (record.get(name) is None, record.get(name))


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
