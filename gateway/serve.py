"""Serving the gateway: uvicorn in this process, or in N worker processes on one socket.

The CLI (``lakesync gateway``) calls :func:`serve` with a :class:`GatewaySettings`; nothing is
passed through the environment and nothing is imported by string. With ``workers > 1`` the
parent binds the listening socket and uvicorn's process supervisor starts the workers with the
``spawn`` method: each receives the pickled uvicorn config — whose app is
``functools.partial(worker_app, settings)``, a factory — and the socket, builds its own app with
:func:`worker_app` and serves on the shared socket. The supervisor restarts a worker that dies
and stops them all on SIGINT/SIGTERM.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys

import uvicorn
from uvicorn.supervisors import Multiprocess

from lakesync_platform.settings import GatewaySettings

from .app import create_app
from .middleware import ProtocolHeadersMiddleware

__all__ = ["GC_THRESHOLDS", "STARTUP_FAILURE", "serve", "tune_gc", "worker_app"]

GC_THRESHOLDS = (50_000, 20, 20)
"""Cyclic garbage collector thresholds of a gateway process (CPython's default: 700, 10, 10)."""
STARTUP_FAILURE = 3
"""Exit status when the app could not start (uvicorn's convention)."""


def tune_gc() -> None:
    """Settings of the cyclic garbage collector for a long-running gateway process.

    Everything created while starting (modules, the app) moves to the permanent generation,
    so full collections no longer walk it; and the youngest generation is collected every
    50 000 allocations instead of every 700. A push or a pull page allocates thousands of
    short-lived objects (deltas, row states, response dicts) that reference counting frees
    anyway; with the defaults, collections triggered by them took half the time of decoding
    the rows of a 1 000-row page. Memory held by cycles is still reclaimed, just later.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def worker_app(settings: GatewaySettings) -> ProtocolHeadersMiddleware:
    """The app of one serving process (uvicorn's app factory), with the collector tuned."""
    app = create_app(settings)
    tune_gc()
    return app


def serve(
    settings: GatewaySettings,
    *,
    host: str,
    port: int,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Serve the gateway until interrupted; ``workers`` processes share one listening socket."""
    config = uvicorn.Config(
        functools.partial(worker_app, settings),
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    if workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
