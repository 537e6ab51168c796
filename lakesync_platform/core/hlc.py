"""Hybrid logical clock, exactly as LakeSync protocol v1 (PROTOCOL.md §2).

A timestamp is a 64-bit unsigned integer ``(wall_ms << 16) | counter``. The wall clock is
injected (``clock`` returns epoch milliseconds); nothing here reads the system time.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import ClockDriftError

__all__ = ["HLC", "MAX_COUNTER", "MAX_DRIFT_MS", "MAX_HLC", "decode", "encode"]

MAX_DRIFT_MS = 5000
"""A remote timestamp whose wall clock is more than this ahead of ours is rejected."""
MAX_COUNTER = 0xFFFF
"""The 16-bit logical counter; overflow carries into the wall clock."""
MAX_HLC = (1 << 64) - 1
"""Largest valid timestamp."""


def encode(wall_ms: int, counter: int) -> int:
    """Pack a wall clock (ms) and a 16-bit counter into one timestamp."""
    return (wall_ms << 16) | (counter & MAX_COUNTER)


def decode(ts: int) -> tuple[int, int]:
    """Split a timestamp into ``(wall_ms, counter)``."""
    return ts >> 16, ts & MAX_COUNTER


class HLC:
    """A strictly monotonic hybrid logical clock over an injected wall clock."""

    __slots__ = ("_clock", "_counter", "_wall")

    def __init__(self, clock: Callable[[], int], wall: int = 0, counter: int = 0) -> None:
        self._clock = clock
        self._wall = wall
        self._counter = counter

    @property
    def state(self) -> tuple[int, int]:
        """The last issued ``(wall_ms, counter)``."""
        return self._wall, self._counter

    def _set(self, wall: int, counter: int) -> int:
        if counter > MAX_COUNTER:
            wall, counter = wall + 1, 0
        self._wall, self._counter = wall, counter
        return encode(wall, counter)

    def now(self) -> int:
        """Issue a timestamp greater than every one issued or received before."""
        wall = max(self._clock(), self._wall)
        counter = self._counter + 1 if wall == self._wall else 0
        return self._set(wall, counter)

    def recv(self, remote: int) -> int:
        """Merge a remote timestamp; raise :class:`ClockDriftError` if it is too far ahead."""
        physical = self._clock()
        remote_wall, remote_counter = decode(remote)
        drift = remote_wall - physical
        if drift > MAX_DRIFT_MS:
            raise ClockDriftError(f"Remote clock is {drift}ms ahead (max drift: {MAX_DRIFT_MS}ms)")
        local_wall = max(physical, self._wall)
        if remote_wall > local_wall:
            return self._set(remote_wall, remote_counter + 1)
        if remote_wall == local_wall:
            return self._set(local_wall, max(self._counter, remote_counter) + 1)
        return self._set(local_wall, self._counter + 1)
