"""What the running app holds: settings, the WAL, the sync service, metrics, rate limiter."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from litestar import Request

from lakesync_platform.core.errors import LakeSyncError
from lakesync_platform.settings import GatewaySettings
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .metrics import Metrics
from .ratelimit import RateLimiter

__all__ = ["GatewayState", "gateway_state", "run_blocking"]

T = TypeVar("T")


class RequestTimeoutError(LakeSyncError):
    """The request did not finish within the configured timeout (504)."""

    code = "INTERNAL_ERROR"
    status = 504


@dataclass
class GatewayState:
    """The app's collaborators, created at startup."""

    settings: GatewaySettings
    wal: WriteAheadLog
    service: SyncService
    metrics: Metrics
    limiter: RateLimiter | None
    clock: Callable[[], int]

    def rate_limit(self, request: Request[Any, Any, Any], subject: str | None) -> None:
        """Apply the optional rate limit to this caller."""
        if self.limiter is None:
            return
        client = request.client
        self.limiter.check(subject or (client.host if client else "unknown"))


def gateway_state(request: Request[Any, Any, Any]) -> GatewayState:
    """The :class:`GatewayState` of the app serving ``request``."""
    state: GatewayState = request.app.state.gateway
    return state


async def run_blocking(state: GatewayState, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking WAL work on a worker thread, bounded by the request timeout."""
    started = time.monotonic()
    with anyio.move_on_after(state.settings.request_timeout_s) as scope:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)
    assert scope.cancelled_caught
    raise RequestTimeoutError(f"Request timeout after {time.monotonic() - started:.1f}s")
