"""HTTP sources: a retrying ``requests`` session, and REST endpoints declared as data.

:func:`session_factory` builds what an HTTP connector is given (never a module-level
session, so tests pass one pointed at a local server): urllib3's ``Retry`` retries connection
errors, 429 and 503 after their ``Retry-After``, and other 5xx with exponential backoff, a
bounded number of times; every request has a timeout; a 401 asks the session's
:class:`Reauthenticator` for fresh credentials once and repeats the request.

:class:`Endpoint` declares a request and where its records and next page are
(:class:`NextToken` in the body, as Jira's ``nextPageToken``; :class:`NextUrl`, as
Salesforce's ``nextRecordsUrl``; :class:`NextOffset`, as Jira's ``startAt``); :class:`RestStream`
turns an endpoint and a pure record mapping into a :class:`~.model.Stream`.

Actions write: :func:`write_retry` retries only what the source cannot have carried out (a
refused connection, a 429), never a request that may have reached it, so a create is sent
once per attempt of the action (the action's durable idempotency covers retries of the
action). An HTTP error left after the retries is raised by :func:`raise_for_source` as an
:class:`~lakesync_platform.core.errors.AdapterError` naming the source, the request and its
answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from ..core.errors import ActionError, AdapterError
from .model import Change, Page

__all__ = [
    "Endpoint",
    "HttpSettings",
    "NextOffset",
    "NextToken",
    "NextUrl",
    "Reauthenticator",
    "RestStream",
    "SessionFactory",
    "SourceSession",
    "error_detail",
    "fetch",
    "raise_for_source",
    "send_action",
    "session_factory",
    "write_retry",
]

RETRY_STATUSES = (429, 500, 502, 503, 504)


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Timeouts and retries of a source's HTTP session."""

    timeout_s: float = 30.0
    tries: int = 5
    backoff_s: float = 0.5
    backoff_max_s: float = 60.0


class Reauthenticator(Protocol):
    """Sets a session's credentials, and fetches fresh ones when the source answers 401."""

    def authenticate(self, session: requests.Session) -> None:
        """Set (or refresh) the session's credentials (headers, auth)."""
        ...


class SourceSession(requests.Session):
    """A session with a default timeout, a count of API calls and one re-authentication on
    401."""

    def __init__(
        self,
        settings: HttpSettings,
        reauth: Reauthenticator | None = None,
        *,
        retry: Retry | None = None,
    ) -> None:
        super().__init__()
        self.timeout_s = settings.timeout_s
        self.reauth = reauth
        self.calls = 0
        retry = retry or Retry(
            total=settings.tries - 1,
            backoff_factor=settings.backoff_s,
            backoff_max=settings.backoff_max_s,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=None,  # also POST: the sources' searches are reads
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        adapter = HTTPAdapter(max_retries=retry)
        self.mount("http://", adapter)
        self.mount("https://", adapter)
        self.hooks["response"].append(self._count)
        if reauth is not None:
            reauth.authenticate(self)

    def _count(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        retries = getattr(response.raw, "retries", None)
        self.calls += 1 + len(getattr(retries, "history", ()) or ())

    def request(  # type: ignore[override]  # the same call, typed loosely
        self, method: str, url: str, *args: Any, **kwargs: Any
    ) -> requests.Response:
        """Send with the default timeout; on 401 re-authenticate once and send again."""
        kwargs.setdefault("timeout", self.timeout_s)
        response = super().request(method, url, *args, **kwargs)
        if response.status_code == 401 and self.reauth is not None:
            self.reauth.authenticate(self)
            response = super().request(method, url, *args, **kwargs)
        return response


SessionFactory = Callable[[Reauthenticator | None], SourceSession]
"""What HTTP connectors are given: a :class:`SourceSession` for an authenticator."""


def session_factory(settings: HttpSettings | None = None) -> SessionFactory:
    """A factory of :class:`SourceSession` with ``settings`` (what connectors are injected)."""
    chosen = settings or HttpSettings()

    def make(reauth: Reauthenticator | None = None) -> SourceSession:
        return SourceSession(chosen, reauth)

    return make


def write_retry(settings: HttpSettings) -> Retry:
    """Retries for requests that change the source: refused connections and 429s only (the
    source did not act on them); a read error or a 5xx may follow a change that happened."""
    tries = settings.tries - 1
    return Retry(
        total=tries,
        connect=tries,
        read=0,
        status=tries,
        other=0,
        backoff_factor=settings.backoff_s,
        backoff_max=settings.backoff_max_s,
        status_forcelist=(429,),
        allowed_methods=None,
        respect_retry_after_header=True,
        raise_on_status=False,
    )


def error_detail(response: requests.Response) -> str:
    """The source's own words for a failed request: Jira's ``errorMessages``/``errors``,
    Salesforce's ``[{"errorCode","message"}]``, an OAuth ``error_description``, else the start
    of the body."""
    try:
        doc = response.json()
    except ValueError:
        return response.text[:200].strip()
    parts: list[str] = []
    if isinstance(doc, list):
        parts = [
            f"{e.get('errorCode', '')}: {e.get('message', '')}"
            for e in doc
            if isinstance(e, Mapping)
        ]
    elif isinstance(doc, Mapping):
        parts += [str(m) for m in doc.get("errorMessages") or ()]
        parts += (
            [f"{k}: {v}" for k, v in (doc.get("errors") or {}).items()]
            if isinstance(doc.get("errors"), Mapping)
            else []
        )
        if "error" in doc:
            parts.append(f"{doc['error']}: {doc.get('error_description', '')}".rstrip(": "))
    return "; ".join(parts) or response.text[:200].strip()


def fetch(
    session: requests.Session, method: str, url: str, source: str, **kwargs: Any
) -> requests.Response:
    """One request of a poll: a success, or an :class:`AdapterError` naming the source — for an
    HTTP error left after the retries, and for an unreachable source or a timeout."""
    try:
        response = session.request(method, url, **kwargs)
    except requests.RequestException as exc:
        path = url.split("://", 1)[-1].partition("/")[2].split("?")[0]
        raise AdapterError(
            f"{source} unreachable on {method} /{path}: {exc.__class__.__name__}"
        ) from exc
    raise_for_source(response, source)
    return response


def raise_for_source(response: requests.Response, source: str) -> None:
    """Raise :class:`AdapterError` for an HTTP error answer (the source, the request, the
    status, the source's message); return for a success."""
    if response.status_code < 400:
        return
    request = response.request
    path = (request.path_url or "").split("?")[0] if request is not None else ""
    method = request.method if request is not None else ""
    raise AdapterError(
        f"{source} answered {response.status_code} to {method} {path}: {error_detail(response)}"
    )


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


_RETRYABLE_4XX = (408, 429)


def send_action(
    session: requests.Session,
    method: str,
    url: str,
    source: str,
    body: Mapping[str, Any] | None = None,
    *,
    retryable: Callable[[requests.Response], bool] | None = None,
) -> dict[str, Any]:
    """One request of an action; its JSON answer (``{}`` when it has none).

    Raises :class:`~lakesync_platform.core.errors.ActionError`: retryable for an unreachable
    source, a timeout, 408, 429 and 5xx (and what ``retryable`` says of other answers), not
    retryable for the source's other refusals (bad params, unknown ids, no permission).
    """
    try:
        response = session.request(method, url, json=body)
    except requests.RequestException as exc:
        raise ActionError(
            f"{source} unreachable: {exc.__class__.__name__}", retryable=True
        ) from exc
    status = response.status_code
    if status >= 400:
        again = status >= 500 or status in _RETRYABLE_4XX
        raise ActionError(
            f"{source} answered {status}: {error_detail(response)}",
            retryable=again or (retryable is not None and retryable(response)),
        )
    if not response.content:
        return {}
    try:
        doc = response.json()
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {"result": doc}


@dataclass(frozen=True, slots=True)
class NextToken:
    """The next page is asked for with the previous body's ``token_path`` value, sent as the
    JSON body field (POST) or query parameter ``send_as``; stops on ``last_path`` true or no
    token."""

    token_path: tuple[str, ...] = ("nextPageToken",)
    send_as: str = "nextPageToken"
    last_path: tuple[str, ...] = ("isLast",)


@dataclass(frozen=True, slots=True)
class NextUrl:
    """The next page is the URL (absolute or a path on the base) at ``url_path``; stops on
    ``done_path`` true or no URL."""

    url_path: tuple[str, ...] = ("nextRecordsUrl",)
    done_path: tuple[str, ...] = ("done",)


@dataclass(frozen=True, slots=True)
class NextOffset:
    """The next page starts after the records seen (query parameter ``start_param``, as Jira's
    ``startAt``); stops on ``last_path`` true, once ``total_path`` records were read, or on an
    empty page."""

    start_param: str = "startAt"
    last_path: tuple[str, ...] = ("isLast",)
    total_path: tuple[str, ...] = ("total",)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One request declared as data: method, path, query, JSON body, where the records are,
    and how to page."""

    path: str
    method: str = "GET"
    params: Mapping[str, Any] = field(default_factory=dict)
    json: Mapping[str, Any] | None = None
    records_path: tuple[str, ...] = ("records",)
    paginator: NextToken | NextUrl | NextOffset | None = None
    source: str = "the source"

    def pages(self, session: requests.Session, base_url: str) -> Iterator[list[Any]]:
        """The records of every page, one page at a time (raises :class:`AdapterError` for an
        HTTP error)."""
        url = base_url.rstrip("/") + self.path
        params, body = dict(self.params), None if self.json is None else dict(self.json)
        while True:
            response = fetch(
                session, self.method, url, self.source, params=params or None, json=body
            )
            doc = response.json()
            records = list(_dig(doc, self.records_path) or [])
            yield records
            pager = self.paginator
            if isinstance(pager, NextOffset):
                total = _dig(doc, pager.total_path)
                position = int(params.get(pager.start_param, 0)) + len(records)
                last = _dig(doc, pager.last_path) is True
                if last or not records or (isinstance(total, int) and position >= total):
                    return
                params[pager.start_param] = position
                continue
            if isinstance(pager, NextToken):
                token = _dig(doc, pager.token_path)
                if not token or _dig(doc, pager.last_path) is True:
                    return
                if body is not None:
                    body[pager.send_as] = token
                else:
                    params[pager.send_as] = token
            elif isinstance(pager, NextUrl):
                nxt = _dig(doc, pager.url_path)
                if not nxt or _dig(doc, pager.done_path) is True:
                    return
                url = nxt if "://" in nxt else base_url.rstrip("/") + nxt
                params = {}
            else:
                return


@dataclass(frozen=True, slots=True)
class RestStream:
    """A stream over an endpoint: ``endpoint_for(state)`` declares the request (the cursor
    goes into its query), ``to_change`` maps a record (pure), ``next_state`` folds a page's
    records into the state that holds once they are committed."""

    name: str
    table: str
    session: requests.Session
    base_url: str
    endpoint_for: Callable[[Mapping[str, Any]], Endpoint]
    to_change: Callable[[Any], Change]
    next_state: Callable[[Mapping[str, Any], list[Any]], Mapping[str, Any]]

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """One :class:`Page` per HTTP page."""
        current = dict(state)
        for records in self.endpoint_for(state).pages(self.session, self.base_url):
            current = dict(self.next_state(current, records))
            yield Page([self.to_change(r) for r in records], current, api_calls=1)
