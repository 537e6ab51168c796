"""Optional fixed-window rate limit per caller (JWT ``sub`` or remote address)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from lakesync_platform.core.errors import RateLimitedError

__all__ = ["RateLimiter"]


class RateLimiter:
    """``limit`` requests per ``window_s`` per key; over it → :class:`RateLimitedError`."""

    def __init__(
        self, limit: int, window_s: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[float, int]] = {}

    def check(self, key: str) -> None:
        """Count a request for ``key``; raise when it is over the limit."""
        now = self._clock()
        with self._lock:
            start, count = self._windows.get(key, (now, 0))
            if now - start >= self.window_s:
                start, count = now, 0
            if count >= self.limit:
                retry = max(1, math.ceil(self.window_s - (now - start)))
                raise RateLimitedError("Too many requests", retry_after=retry)
            self._windows[key] = (start, count + 1)
            if len(self._windows) > 100_000:
                self._windows = {
                    k: v for k, v in self._windows.items() if now - v[0] < self.window_s
                }
