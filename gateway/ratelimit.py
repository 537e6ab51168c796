"""The optional per-caller rate limit, on the ``limits`` package (PROTOCOL.md §4.2).

A fixed window of ``limit`` requests per ``window_s`` seconds per caller, as the reference's
``rate-limiter.ts``; over it the request is answered 429 ``RATE_LIMITED`` with ``Retry-After``
(the seconds until the caller's window ends). The auth guards apply it once the token is
verified — the reference's order, auth then rate limit — so the caller is the verified ``sub``,
or the remote address when auth is off: a forged token is refused (401) before it could pick
someone's budget.

The counters live in this process (``limits``' in-memory storage, which expires idle callers
on its own): with several workers each one limits on its own, so a caller may get up to
``workers × limit`` per window.
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter

from lakesync_platform.core.errors import RateLimitedError

__all__ = ["CallerRateLimit"]


class CallerRateLimit:
    """``limit`` requests per ``window_s`` seconds per caller; beyond: :class:`RateLimitedError`."""

    def __init__(self, limit: int, window_s: int) -> None:
        self._item = RateLimitItemPerSecond(limit, window_s)
        self._limiter = FixedWindowRateLimiter(MemoryStorage())

    def check(self, caller: str) -> None:
        """Count a request of ``caller``; raise when it is over the limit."""
        if self._limiter.hit(self._item, caller):
            return
        reset_at, _ = self._limiter.get_window_stats(self._item, caller)
        retry_after = max(1, math.ceil(reset_at - time.time()))
        raise RateLimitedError("Too many requests", retry_after=retry_after)
