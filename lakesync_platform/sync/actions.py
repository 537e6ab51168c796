"""Actions (PROTOCOL.md §8): the handler registry and dispatch with durable idempotency.

:class:`ActionService` is the one entry point of every transport (the HTTP routes, WebSocket
action frames)::

    results = service.dispatch(gw, client_id, actions, claims=claims)  # one result per action
    server_hlc = service.server_hlc()          # the response's serverHlc
    discovery = service.describe(gw)           # {"connectors": {name: [ActionDescriptor]}}

For each action, in request order:

1. the connector and its action type are looked up in the :class:`ActionRegistry` and the params
   checked against the type's schema — an unknown connector or type is ``ACTION_NOT_SUPPORTED``,
   bad params ``ACTION_VALIDATION_ERROR`` (neither is stored: they depend on the configuration
   only, and a registry that learns the connector later runs the action);
2. its keys — ``id:<actionId>`` and, when set, ``key:<idempotencyKey>``, both scoped to the
   gateway and the client — are claimed in the WAL database
   (:meth:`~lakesync_platform.core.wal.WalStore.claim_action`). A result stored under either
   key is returned as it was stored (under the requesting action's ``actionId``): the handler
   never runs twice, across restarts and across gateway processes sharing the database. A
   claim held by another request (a concurrent duplicate) is waited for up to the action
   timeout, then answered ``ACTION_IN_PROGRESS`` (retryable);
3. the handler runs on a worker thread. Its result is stored — a success, or an error that is
   not retryable — or, for a retryable error, the claim is released so a retry runs it again,
   as the reference caches results. A handler still running after ``timeout_s`` is answered
   ``ACTION_TIMEOUT`` (retryable) but keeps its claim and stores its result when it finishes,
   so the retry gets that result. A claim not finished within ``lease_s`` (its process
   crashed) is taken over by the next retry.

Stored results are kept ``retention_s`` seconds (purged at most once a minute by each service).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import msgspec

from ..core.actions import (
    Action,
    ActionContext,
    ActionDescriptor,
    ActionErrorResult,
    ActionHandler,
    ActionResult,
    action_result_from_json,
    error_result,
)
from ..core.errors import (
    ActionError,
    ActionInProgressError,
    ActionNotSupportedError,
    ActionTimeoutError,
)
from ..core.hlc import HLC
from ..core.sync_rules import Claims
from ..core.wal import WalStore

__all__ = ["ActionRegistry", "ActionService", "action_keys"]

log = logging.getLogger(__name__)

_PURGE_EVERY_S = 60.0
_WAIT_FIRST_S = 0.01
_WAIT_MAX_S = 0.2
_WORKERS = 32
"""Handlers running at once per service (each blocks a thread on its external system)."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def action_keys(action: Action) -> list[str]:
    """The keys an action's result is stored under: its id, and its idempotency key if set
    (an empty key counts as none, as in the reference)."""
    keys = [f"id:{action.action_id}"]
    if action.idempotency_key:
        keys.append(f"key:{action.idempotency_key}")
    return keys


class ActionRegistry:
    """Action handlers by gateway id and connector name: those registered here, and those
    ``provider`` gives for a gateway (the registered source connectors' handlers; a handler
    registered here wins over a provided one of the same name)."""

    def __init__(
        self, provider: Callable[[str], Mapping[str, ActionHandler]] | None = None
    ) -> None:
        self._handlers: dict[str, dict[str, ActionHandler]] = {}
        self._lock = threading.Lock()
        self._provider = provider

    def register(self, gw: str, connector: str, handler: ActionHandler) -> None:
        """Route ``gw``'s actions for ``connector`` to ``handler`` (replacing any other)."""
        with self._lock:
            self._handlers.setdefault(gw, {})[connector] = handler

    def unregister(self, gw: str, connector: str) -> None:
        """Stop routing ``gw``'s actions for ``connector``."""
        with self._lock:
            self._handlers.get(gw, {}).pop(connector, None)

    def handlers(self, gw: str) -> dict[str, ActionHandler]:
        """``gw``'s handlers by connector name."""
        provided = dict(self._provider(gw)) if self._provider is not None else {}
        with self._lock:
            return {**provided, **self._handlers.get(gw, {})}

    def resolve(self, gw: str, action: Action) -> tuple[ActionHandler, ActionDescriptor]:
        """The handler and descriptor for ``action``; raises :class:`ActionNotSupportedError`
        with the reference's messages."""
        handler = self.handlers(gw).get(action.connector)
        if handler is None:
            raise ActionNotSupportedError(
                f'No action handler registered for connector "{action.connector}"'
            )
        for descriptor in handler.descriptors:
            if descriptor.action_type == action.action_type:
                return handler, descriptor
        raise ActionNotSupportedError(
            f'Action type "{action.action_type}" not supported by connector "{action.connector}"'
        )


class ActionService:
    """Dispatch and discovery of actions for every gateway id (see the module docstring)."""

    def __init__(
        self,
        wal: WalStore,
        registry: ActionRegistry,
        clock: Callable[[], int],
        *,
        timeout_s: float = 10.0,
        lease_s: float = 60.0,
        retention_s: float = 86_400.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_s <= timeout_s:
            raise ValueError("the action lease must be longer than the action timeout")
        self.wal = wal
        self.registry = registry
        self._clock = clock
        self._monotonic = monotonic
        self.timeout_s = timeout_s
        self._lease_ms = int(lease_s * 1000)
        self._retention_ms = int(retention_s * 1000)
        self._hlc = HLC(clock)
        self._hlc_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="lakesync-action")
        self._next_purge = 0.0

    def close(self) -> None:
        """Stop taking actions; handlers already running finish and store their results."""
        self._pool.shutdown(wait=False)

    def server_hlc(self) -> int:
        """A fresh server HLC (the ``serverHlc`` of a response and of each new result)."""
        with self._hlc_lock:
            return self._hlc.now()

    def describe(self, gw: str) -> dict[str, Any]:
        """Discovery: ``{"connectors": {name: [ActionDescriptor JSON]}}`` of ``gw``."""
        return {
            "connectors": {
                name: [d.to_json() for d in handler.descriptors]
                for name, handler in sorted(self.registry.handlers(gw).items())
            }
        }

    def dispatch(
        self,
        gw: str,
        client_id: str,
        actions: Sequence[Action],
        *,
        claims: Claims | None = None,
    ) -> list[ActionResult | ActionErrorResult]:
        """Run ``actions`` (validated, each of ``client_id``) in order; one result each.

        Blocking (call it on a worker thread); raises
        :class:`~lakesync_platform.core.errors.AdapterError` only if the WAL fails.
        """
        self._purge()
        context = ActionContext(gw, client_id, claims or {})
        return [self._dispatch_one(gw, action, context) for action in actions]

    # ------------------------------------------------------------------ one action

    def _dispatch_one(
        self, gw: str, action: Action, context: ActionContext
    ) -> ActionResult | ActionErrorResult:
        try:
            handler, descriptor = self.registry.resolve(gw, action)
            descriptor.check_params(action.params)
        except ActionError as exc:
            return error_result(action.action_id, exc)
        keys = action_keys(action)
        owner = uuid.uuid4().hex
        deadline = self._monotonic() + self.timeout_s
        wait = _WAIT_FIRST_S
        while True:
            claim = self.wal.claim_action(
                gw, context.client_id, keys, owner, self._clock(), self._lease_ms
            )
            if claim.status == "stored":
                assert claim.result_json is not None
                return _replayed(action.action_id, claim.result_json)
            if claim.status == "claimed":
                break
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                return error_result(
                    action.action_id,
                    ActionInProgressError(
                        "The same action is running in another request; retry it for its result"
                    ),
                )
            time.sleep(min(wait, remaining))
            wait = min(wait * 2, _WAIT_MAX_S)
        future = self._pool.submit(self._run, handler, action, context, keys, owner)
        try:
            return future.result(timeout=max(deadline - self._monotonic(), 0.0))
        except FutureTimeout:
            return error_result(
                action.action_id,
                ActionTimeoutError(
                    f"Action still running after {self.timeout_s:g}s; retry it for its result"
                ),
            )

    def _run(
        self,
        handler: ActionHandler,
        action: Action,
        context: ActionContext,
        keys: list[str],
        owner: str,
    ) -> ActionResult | ActionErrorResult:
        """Execute on a worker thread, then store the result (or release a retryable one)."""
        result: ActionResult | ActionErrorResult
        try:
            data = handler.execute(action, context)
            result = ActionResult(action.action_id, dict(data), self.server_hlc())
        except ActionError as exc:
            result = error_result(action.action_id, exc)
        except Exception as exc:  # a handler's bug: reported as a failure that is not retried
            log.exception("action handler %s failed on %s", action.connector, action.action_type)
            result = ActionErrorResult(
                action.action_id,
                ActionError.code,
                f"Action handler failed: {exc.__class__.__name__}: {exc}",
                False,
            )
        release = isinstance(result, ActionErrorResult) and result.retryable
        stored = None if release else _encode(result.to_json()).decode()
        try:
            if not self.wal.finish_action(
                context.gateway_id, context.client_id, keys, owner, stored, self._clock()
            ):
                log.warning("action %s finished after its claim was taken over", action.action_id)
        except Exception:
            log.exception("could not store the result of action %s", action.action_id)
        return result

    def _purge(self) -> None:
        now = self._monotonic()
        if now < self._next_purge:
            return
        self._next_purge = now + _PURGE_EVERY_S
        self.wal.purge_actions(self._clock() - self._retention_ms)


def _replayed(action_id: str, result_json: str) -> ActionResult | ActionErrorResult:
    stored: Mapping[str, Any] = _decode(result_json)
    return action_result_from_json({**stored, "actionId": action_id})
