"""HTTP sources: a retrying ``requests`` session, and REST endpoints declared as data.

:func:`session_factory` builds what an HTTP connector is given (never a module-level
session, so tests pass one pointed at a local server): urllib3's ``Retry`` retries connection
errors, 429 and 503 after their ``Retry-After``, and other 5xx with exponential backoff, a
bounded number of times; every request has a timeout; a 401 asks the session's
:class:`Reauthenticator` for fresh credentials once and repeats the request.

:class:`Endpoint` declares a request and where its records and next page are
(:class:`NextToken` in the body, as Jira's ``nextPageToken``; :class:`NextUrl`, as
Salesforce's ``nextRecordsUrl``); :class:`RestStream` turns an endpoint and a pure record
mapping into a :class:`~.model.Stream`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from .model import Change, Page

__all__ = [
    "Endpoint",
    "HttpSettings",
    "NextToken",
    "NextUrl",
    "Reauthenticator",
    "RestStream",
    "SourceSession",
    "session_factory",
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

    def __init__(self, settings: HttpSettings, reauth: Reauthenticator | None = None) -> None:
        super().__init__()
        self.timeout_s = settings.timeout_s
        self.reauth = reauth
        self.calls = 0
        retry = Retry(
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


def session_factory(
    settings: HttpSettings | None = None,
) -> Callable[[Reauthenticator | None], SourceSession]:
    """A factory of :class:`SourceSession` with ``settings`` (what connectors are injected)."""
    chosen = settings or HttpSettings()

    def make(reauth: Reauthenticator | None = None) -> SourceSession:
        return SourceSession(chosen, reauth)

    return make


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


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
class Endpoint:
    """One request declared as data: method, path, query, JSON body, where the records are,
    and how to page."""

    path: str
    method: str = "GET"
    params: Mapping[str, Any] = field(default_factory=dict)
    json: Mapping[str, Any] | None = None
    records_path: tuple[str, ...] = ("records",)
    paginator: NextToken | NextUrl | None = None

    def pages(self, session: requests.Session, base_url: str) -> Iterator[list[Any]]:
        """The records of every page, one page at a time (raises for an HTTP error)."""
        url = base_url.rstrip("/") + self.path
        params, body = dict(self.params), None if self.json is None else dict(self.json)
        while True:
            response = session.request(self.method, url, params=params or None, json=body)
            response.raise_for_status()
            doc = response.json()
            records = _dig(doc, self.records_path)
            yield list(records or [])
            pager = self.paginator
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
