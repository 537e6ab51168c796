"""Draining a gateway process on SIGTERM, so that a balancer moves its clients away unharmed.

A balancer (``deploy/haproxy.cfg``) asks every gateway's ``/ready`` every few seconds and stops
sending to one after a few failed answers. A process that simply stopped serving on SIGTERM
would refuse the requests the balancer still sends it meanwhile (the 502s and closed
connections of a naive rolling restart). So, on SIGTERM:

1. readiness fails at once (``/ready`` answers 503 ``draining``) while everything else is
   still served, new connections included — the balancer still sends some;
2. after ``drain_s`` seconds (:attr:`~lakesync_platform.settings.GatewaySettings.drain_s`: at
   least the balancer's check interval × fall count) the balancer sends nothing new: every
   WebSocket session is closed with 1001 (going away), and its client reconnects through the
   balancer to another process;
3. then the server's own graceful shutdown runs: it stops listening, finishes the requests in
   flight, closes idle connections and exits.

SIGINT (Ctrl-C) skips the wait of step 2; a second signal during the wait stops at once.

The server (uvicorn) installs its own SIGTERM/SIGINT handlers before it builds the app, so
:meth:`Drain.install`, called from the serving process's app factory, wraps them: the server's
handler runs only at step 3. Tests and other embeddings of the app that never call it keep the
server's behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

__all__ = ["Drain"]

log = logging.getLogger(__name__)

SignalHandler = Callable[[int, FrameType | None], Any]


class Drain:
    """The drain of one serving process: whether it has begun, and what ends it."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._began: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._going_away: Callable[[], Awaitable[None]] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def draining(self) -> bool:
        """Whether a stop signal has arrived (readiness then fails)."""
        return self._began is not None

    def bind(self, going_away: Callable[[], Awaitable[None]]) -> None:
        """Called at the app's startup, on its event loop: ``going_away`` closes the
        WebSocket sessions (step 2)."""
        self._loop = asyncio.get_running_loop()
        self._going_away = going_away

    def install(self) -> None:
        """Wrap the server's SIGTERM and SIGINT handlers (main thread, after the server set
        them): the drain runs first, then the server's handler."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            server_handler = signal.getsignal(sig)
            if callable(server_handler):
                signal.signal(sig, self._handler(server_handler))

    def _handler(self, server_handler: SignalHandler) -> SignalHandler:
        def on_signal(sig: int, frame: FrameType | None) -> None:
            if self._began is not None or self._loop is None:
                server_handler(sig, frame)  # a second signal, or not serving yet: stop now
                return
            self._began = time.monotonic()
            delay = self.delay_s if sig == signal.SIGTERM else 0.0
            log.warning("draining: /ready fails from now; stopping in %.1f s", delay)
            self._loop.call_soon_threadsafe(self._start, server_handler, sig, delay)

        return on_signal

    def _start(self, server_handler: SignalHandler, sig: int, delay: float) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._finish(server_handler, sig, delay), name="lakesync-drain"
        )

    async def _finish(self, server_handler: SignalHandler, sig: int, delay: float) -> None:
        """Wait ``delay``, close the WebSockets with 1001, then let the server stop."""
        try:
            await asyncio.sleep(delay)
            if self._going_away is not None:
                await self._going_away()
        finally:
            server_handler(sig, None)
