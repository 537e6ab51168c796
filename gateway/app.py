"""The Litestar app factory: ``create_app(settings)``.

Everything the app needs is built from ``settings`` at startup (the WAL is opened and migrated,
the sync, admin and action services created, the declared action handlers built) and released
at shutdown. Nothing is read from the environment here: the caller (``lakesync gateway``, a
test) passes the settings in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from litestar import Litestar
from litestar.exceptions import HTTPException

from lakesync_platform.adapters.checkpoints import open_checkpoint_store
from lakesync_platform.core.checkpoint import CheckpointStore
from lakesync_platform.core.errors import LakeSyncError
from lakesync_platform.settings import GatewaySettings
from lakesync_platform.sync.actions import ActionService
from lakesync_platform.sync.admin import GatewayAdmin
from lakesync_platform.sync.realtime import RealtimeService
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog

from .controllers import CONTROLLERS
from .controllers.realtime import realtime_limits
from .dependencies import ServicesSlot, services_dependency
from .errors import handle_http_exception, handle_lakesync_error
from .handlers import build_action_handlers
from .metrics import Metrics
from .middleware import ProtocolHeadersMiddleware
from .openapi import openapi_config
from .ratelimit import CallerRateLimit
from .sources import DeclaredSources
from .state import GatewayServices, GatewayState, Offload

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _checkpoint_store(settings: GatewaySettings) -> CheckpointStore | None:
    """Where the pipeline's checkpoints are read from (``None``: none configured)."""
    if not settings.checkpoints:
        return None
    s3 = settings.object_store
    return open_checkpoint_store(
        settings.checkpoints,
        endpoint=s3.endpoint,
        region=s3.region,
        access_key_id=s3.access_key_id,
        secret_access_key=s3.secret_access_key,
        session_token=s3.session_token,
    )


def create_app(
    settings: GatewaySettings,
    *,
    clock: Callable[[], int] | None = None,
    wal: WriteAheadLog | None = None,
    metrics_dir: Path | None = None,
) -> ProtocolHeadersMiddleware:
    """Build the gateway app. ``clock`` (epoch ms) and ``wal`` may be injected for tests;
    ``metrics_dir`` is the metrics directory shared by the workers of a multi-process server."""
    wall = clock or _wall_ms
    slot = ServicesSlot()

    def startup(app: Litestar) -> None:
        sources = DeclaredSources.open(settings)
        metrics = Metrics(metrics_dir)
        store = wal or WriteAheadLog.open(
            settings.wal_url, now_ms=wall(), on_group_commit=metrics.observe_group_commit
        )
        handlers = build_action_handlers(settings, store.connectors)
        limiter = (
            CallerRateLimit(settings.rate_limit, settings.rate_window_s)
            if settings.rate_limit
            else None
        )
        sync = SyncService(store, wall, max_backlog_bytes=settings.max_backlog_bytes)
        feed_offload = Offload(
            settings.request_timeout_s, anyio.CapacityLimiter(settings.ws_feed_threads)
        )
        slot.services = GatewayServices(
            sync=sync,
            admin=GatewayAdmin(store, wall),
            actions=ActionService(
                store,
                handlers.registry,
                wall,
                timeout_s=settings.action_timeout_s,
                lease_s=settings.action_lease_s,
                retention_s=settings.action_retention_s,
            ),
            metrics=metrics,
            offload=Offload(settings.request_timeout_s),
            realtime=RealtimeService(sync, feed_offload, realtime_limits(settings)),
            sources=sources,
            checkpoints=_checkpoint_store(settings),
        )
        slot.services.realtime.serve_actions(slot.services.actions, slot.services.offload)
        app.state.gateway = GatewayState(
            settings=settings,
            wal=store,
            services=slot.services,
            limiter=limiter,
            clock=wall,
            handlers=handlers,
        )
        log.info("gateway ready (auth %s)", "on" if settings.auth_enabled else "OFF")

    async def shutdown(app: Litestar) -> None:
        state: GatewayState | None = getattr(app.state, "gateway", None)
        if state is not None:
            await state.services.realtime.close_all()
            state.services.sync.close()
            state.services.actions.close()
            state.handlers.close()
            state.services.sources.close()
            if wal is None:
                state.wal.close()

    handlers: dict[Any, Any] = {
        LakeSyncError: handle_lakesync_error,
        HTTPException: handle_http_exception,
        Exception: handle_http_exception,
    }
    app = Litestar(
        route_handlers=CONTROLLERS,
        dependencies=services_dependency(slot),
        on_startup=[startup],
        on_shutdown=[shutdown],
        exception_handlers=handlers,
        request_max_body_size=settings.max_body_bytes,
        openapi_config=openapi_config(),
        debug=False,
    )
    # Wraps the whole app (not per route) so 301s, OPTIONS and 404s get the protocol's headers.
    return ProtocolHeadersMiddleware(app, settings.allowed_origins)
