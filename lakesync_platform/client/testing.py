"""Test helpers shipped with the client (as ``structlog.testing``): a transport wrapper that
fails on cue (a clock you move by hand is :class:`lakesync_platform.testing.ManualClock`).

::

    clock = ManualClock(1_700_000_000_000)
    flaky = FlakyTransport(InProcessTransport(service, "gw"))
    client = create_client(name="t", backend="memory", transport=flaky, clock=clock,
                           auto_sync_ms=0, schemas=[...])
    flaky.offline = True          # every call raises TransportError
    flaky.lose_responses = 1      # the next push commits on the gateway, then "times out"
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.delta import RowDelta
from ._errors import TransportError
from ._transport import Checkpoint, PullResponse, PushAck, Transport

__all__ = ["FlakyTransport"]


class FlakyTransport:
    """Wraps a transport and injects failures.

    * ``offline``: every call raises :class:`TransportError` before reaching the gateway;
    * ``lose_responses``: that many pushes reach the gateway (and commit) but raise
      :class:`TransportError` as if the response was lost;
    * ``duplicate_pushes``: every push is delivered twice (the second result is returned).

    ``pushes`` counts the pushes that reached the gateway; ``pushed_delta_ids`` lists the ids.
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.offline = False
        self.lose_responses = 0
        self.duplicate_pushes = False
        self.pushes = 0
        self.pushed_delta_ids: list[str] = []

    def _check(self) -> None:
        if self.offline:
            raise TransportError("gateway unreachable (FlakyTransport.offline)")

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        """Push through the inner transport, failing as configured."""
        self._check()
        ack = self.inner.push(client_id, deltas, last_seen_hlc)
        self.pushes += 1
        self.pushed_delta_ids.extend(d.delta_id for d in deltas)
        if self.duplicate_pushes:
            ack = self.inner.push(client_id, deltas, last_seen_hlc)
            self.pushes += 1
        if self.lose_responses > 0:
            self.lose_responses -= 1
            raise TransportError("push response lost (FlakyTransport.lose_responses)")
        return ack

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        """Pull through the inner transport unless offline."""
        self._check()
        return self.inner.pull(client_id, since, limit, source)

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        """The inner transport's checkpoint unless offline."""
        self._check()
        return self.inner.checkpoint(client_id)

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()
