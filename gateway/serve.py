"""Serving the gateway: uvicorn in this process, or in N worker processes on one socket.

The CLI (``lakesync gateway``) calls :func:`serve` with a :class:`GatewaySettings`; the settings
are not passed through the environment and nothing is imported by string. With ``workers > 1``
the parent binds the listening socket and uvicorn's process supervisor starts the workers with
the ``spawn`` method: each receives the pickled uvicorn config — whose app is
``functools.partial(worker_app, settings, metrics_dir)``, a factory — and the socket, builds its
own app with :func:`worker_app` and serves on the shared socket. The supervisor restarts a
worker that dies and stops them all on SIGINT/SIGTERM.

Metrics of several workers use ``prometheus_client``'s multiprocess mode: the parent creates a
fresh directory for the run, names it in ``PROMETHEUS_MULTIPROC_DIR`` before any worker starts
(the workers inherit the variable, and ``prometheus_client`` reads it when they import it), passes
it to every worker's app, tells the metrics when a worker has exited
(:func:`~prometheus_client.multiprocess.mark_process_dead`) and removes the directory at exit.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import socket
import sys
import tempfile
from pathlib import Path

import uvicorn
from prometheus_client.multiprocess import mark_process_dead
from uvicorn.supervisors import Multiprocess

from lakesync_platform.settings import GatewaySettings

from .app import create_app
from .drain import Drain
from .middleware import ProtocolHeadersMiddleware

__all__ = ["GC_THRESHOLDS", "METRICS_DIR_ENV", "STARTUP_FAILURE", "serve", "tune_gc", "worker_app"]

GC_THRESHOLDS = (50_000, 20, 20)
"""Cyclic garbage collector thresholds of a gateway process (CPython's default: 700, 10, 10)."""
STARTUP_FAILURE = 3
"""Exit status when the app could not start (uvicorn's convention)."""
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The variable naming ``prometheus_client``'s multiprocess directory."""


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


def worker_app(
    settings: GatewaySettings, metrics_dir: Path | None = None
) -> ProtocolHeadersMiddleware:
    """The app of one serving process (uvicorn's app factory), with the collector tuned;
    ``metrics_dir`` is the multiprocess metrics directory when there are several workers.

    uvicorn calls it in the serving process after installing its signal handlers, so the
    process's :class:`~.drain.Drain` wraps them here: SIGTERM drains before the server stops.
    """
    drain = Drain(settings.drain_s)
    app = create_app(settings, metrics_dir=metrics_dir, drain=drain)
    drain.install()
    tune_gc()
    return app


class _Supervisor(Multiprocess):
    """uvicorn's worker supervisor that also tells the metrics which workers have exited."""

    def __init__(
        self, config: uvicorn.Config, sockets: list[socket.socket], metrics_dir: Path
    ) -> None:
        super().__init__(config, sockets)
        self._metrics_dir = metrics_dir
        self._pids: set[int] = set()

    def keep_subprocess_alive(self) -> None:
        super().keep_subprocess_alive()
        self._forget_exited()

    def handle_signals(self) -> None:
        super().handle_signals()
        self._forget_exited()

    def _forget_exited(self) -> None:
        """Drop the live gauges of workers replaced since the last look."""
        pids = {p.pid for p in self.processes if p.pid is not None}
        for pid in self._pids - pids:
            # prometheus_client leaves mark_process_dead unannotated
            mark_process_dead(pid, str(self._metrics_dir))  # type: ignore[no-untyped-call]
        self._pids = pids


def serve(
    settings: GatewaySettings,
    *,
    host: str,
    port: int,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Serve the gateway until interrupted; ``workers`` processes share one listening socket."""

    def config(metrics_dir: Path | None) -> uvicorn.Config:
        return uvicorn.Config(
            functools.partial(worker_app, settings, metrics_dir),
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            access_log=False,
            timeout_graceful_shutdown=10,
            # Broadcast frames are one small row each; compressing them per socket nearly
            # doubled the broadcast latency at 1 000 sockets (bench_realtime).
            ws_per_message_deflate=False,
        )

    if workers > 1:
        with tempfile.TemporaryDirectory(prefix="lakesync-metrics-") as tmp:
            metrics_dir = Path(tmp)
            os.environ[METRICS_DIR_ENV] = tmp
            multi = config(metrics_dir)
            _Supervisor(multi, [multi.bind_socket()], metrics_dir).run()
        return
    server = uvicorn.Server(config(None))
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
