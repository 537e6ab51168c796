"""What the running app holds: settings, the WAL, the services routes use, the rate limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from litestar.connection import ASGIConnection

from lakesync_platform.core.checkpoint import CheckpointStore
from lakesync_platform.core.errors import LakeSyncError
from lakesync_platform.settings import GatewaySettings
from lakesync_platform.sync.actions import ActionService
from lakesync_platform.sync.admin import GatewayAdmin
from lakesync_platform.sync.realtime import RealtimeService
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .drain import Drain
from .handlers import ActionHandlers
from .metrics import Metrics
from .ratelimit import CallerRateLimit
from .sources import DeclaredSources

__all__ = ["GatewayServices", "GatewayState", "Offload", "gateway_state"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Offload:
    """Runs blocking WAL work on a worker thread, bounded by the request timeout (504).

    ``limiter`` bounds the threads it uses (default: anyio's shared pool of the requests).
    """

    timeout_s: float
    limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a worker thread."""
        started = time.monotonic()
        with anyio.move_on_after(self.timeout_s) as scope:
            return await anyio.to_thread.run_sync(
                lambda: fn(*args, **kwargs), abandon_on_cancel=True, limiter=self.limiter
            )
        assert scope.cancelled_caught
        raise LakeSyncError(
            f"Request timeout after {time.monotonic() - started:.1f}s", http_status=504
        )


@dataclass(frozen=True, slots=True)
class GatewayServices:
    """What route handlers receive (the ``services`` dependency); none of it is the store.

    ``sync`` serves push, pull and config writes; ``admin`` status, config reads and flush
    requests; ``actions`` action dispatch and discovery; ``sources`` the declared sources pulls
    may name; ``offload`` runs their blocking calls on a worker thread; ``realtime`` holds the
    WebSocket sessions and feeds them after every commit; ``drain`` says whether the process
    is draining (readiness fails); ``checkpoints`` is where the pipeline's checkpoints are read
    from (``None``: none are served).
    """

    sync: SyncService
    admin: GatewayAdmin
    actions: ActionService
    metrics: Metrics
    offload: Offload
    realtime: RealtimeService
    sources: DeclaredSources
    drain: Drain
    checkpoints: CheckpointStore | None = None


@dataclass
class GatewayState:
    """The app's collaborators, created at startup; ``clock`` is the wall clock in epoch ms."""

    settings: GatewaySettings
    wal: WriteAheadLog
    services: GatewayServices
    limiter: CallerRateLimit | None
    clock: Callable[[], int]
    handlers: ActionHandlers


def gateway_state(connection: ASGIConnection[Any, Any, Any, Any]) -> GatewayState:
    """The :class:`GatewayState` of the app serving ``connection``."""
    state: GatewayState = connection.app.state.gateway
    return state
