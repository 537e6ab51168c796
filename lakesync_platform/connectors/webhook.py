"""The ``webhook`` action handler: each action is a JSON ``POST`` to a configured URL.

The body is ``{"actionId","actionType","connector","gatewayId","clientId","params",
"idempotencyKey"?}`` and the ``Idempotency-Key`` header carries the action's idempotency key (its
``actionId`` when it has none), so the receiver can deduplicate the retries below. The request
goes through :mod:`requests` with urllib3's :class:`~urllib3.util.retry.Retry`: connection
failures, read timeouts and 429/502/503/504 answers are retried ``retries`` times with
exponential backoff (``Retry-After`` honoured).

The answer becomes the action's result: a 2xx with a JSON object body is the result's ``data``
(any other 2xx body gives ``{"status": <code>}``); a 4xx is a failure that is not retryable
(408 and 429 are); a 5xx, a timeout or a connection failure left after the retries is a
retryable failure (``ACTION_EXECUTION_ERROR``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from ..core.actions import Action, ActionContext, ActionDescriptor
from ..core.errors import ActionError

__all__ = ["WebhookHandler"]

_RETRY_STATUSES: Final = (429, 502, 503, 504)
_RETRYABLE_4XX: Final = (408, 429)


class WebhookHandler:
    """An :class:`~lakesync_platform.core.actions.ActionHandler` that POSTs each action."""

    def __init__(
        self,
        url: str,
        descriptors: Sequence[ActionDescriptor],
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
        retries: int = 2,
        backoff_s: float = 0.2,
    ) -> None:
        self.url = url
        self._descriptors = tuple(descriptors)
        self._headers = dict(headers or {})
        self._timeout_s = timeout_s
        retry = Retry(
            total=retries,
            backoff_factor=backoff_s,
            status_forcelist=_RETRY_STATUSES,
            allowed_methods=frozenset({"POST"}),  # safe: the receiver sees the Idempotency-Key
            raise_on_status=False,
            respect_retry_after_header=True,
        )
        self._session = requests.Session()
        adapter = HTTPAdapter(max_retries=retry)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    @property
    def descriptors(self) -> Sequence[ActionDescriptor]:
        """The declared action types."""
        return self._descriptors

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        """POST the action; the answer's JSON object is the result's data."""
        body: dict[str, Any] = {
            "actionId": action.action_id,
            "actionType": action.action_type,
            "connector": action.connector,
            "gatewayId": context.gateway_id,
            "clientId": context.client_id,
            "params": dict(action.params),
        }
        if action.idempotency_key:
            body["idempotencyKey"] = action.idempotency_key
        headers = {
            **self._headers,
            "Idempotency-Key": action.idempotency_key or action.action_id,
        }
        try:
            response = self._session.post(
                self.url, json=body, headers=headers, timeout=self._timeout_s
            )
        except requests.RequestException as exc:
            raise ActionError(
                f"Webhook {self.url} unreachable: {exc.__class__.__name__}", retryable=True
            ) from exc
        status = response.status_code
        if status >= 400:
            raise ActionError(
                f"Webhook answered {status}: {response.text[:200]}",
                retryable=status >= 500 or status in _RETRYABLE_4XX,
            )
        try:
            data = response.json()
        except ValueError:
            data = None
        return data if isinstance(data, dict) else {"status": status}

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._session.close()
