"""The transport port between the sync engine and a gateway, and its in-process implementation.

A :class:`Transport` pushes deltas, pulls pages of the ``stamped`` format (decoded into
:class:`~._wire.RemoteRow`) and fetches the initial-sync checkpoint. Failures are raised as the
exceptions of :mod:`lakesync_platform.core.errors` (what the gateway answered) or
:class:`~lakesync_platform.client.TransportError` (it could not be reached); the engine treats
both transports alike.

* :class:`InProcessTransport` calls an :class:`EmbeddedSyncService` (the gateway's sync engine,
  ``lakesync_platform.sync.service.SyncService``) directly — for tests, benchmarks and apps
  that embed it; the client never imports the server, it only names the shape it calls;
* :class:`~lakesync_platform.client.HttpTransport` speaks protocol v1 over HTTP;
* :class:`OfflineTransport` is what a client without a gateway uses: every call fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..core.checkpoint import CheckpointStore
from ..core.delta import RowDelta
from ..core.errors import SourceNotFoundError
from ..core.sync_rules import Claims
from ._errors import TransportError
from ._wire import (
    CheckpointBatch,
    RemoteRow,
    checkpoint_batches,
    parse_remote_rows,
    read_frames,
)

__all__ = [
    "Checkpoint",
    "EmbeddedCheckpoints",
    "EmbeddedSyncService",
    "InProcessTransport",
    "OfflineTransport",
    "PullResponse",
    "PushAck",
    "RealtimeTransport",
    "RefusedWrite",
    "Transport",
]


@dataclass(frozen=True, slots=True)
class RefusedWrite:
    """A delta of an accepted push that the gateway's sync rules did not let this client write
    (``code`` ``WRITE_FORBIDDEN``; docs/gateway.md, "Security model")."""

    delta_id: str
    table: str
    row_id: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class PushAck:
    """The gateway accepted a push: ``accepted`` deltas (new + duplicates), and ``refused``
    the ones its sync rules did not let the client write."""

    server_hlc: int
    accepted: int
    refused: tuple[RefusedWrite, ...] = ()


@dataclass(frozen=True, slots=True)
class PullResponse:
    """One pull page: the rows, the cursor to resume from, and whether more follow."""

    rows: list[RemoteRow]
    server_hlc: int
    has_more: bool


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An initial-sync snapshot being read (PROTOCOL.md §6): rows as of cursor ``snapshot_hlc``
    (the pull cursor to resume from; 0: pull from the start), in ``batches`` read as they are
    consumed — a frame of the stream at a time, so a large checkpoint never sits in memory
    whole: blocks of stamped rows, or rows without column stamps (the reference's format).
    ``close`` releases the stream (call it whether or not every batch was read)."""

    snapshot_hlc: int
    batches: Iterable[CheckpointBatch]
    close: Callable[[], None] = field(default=_nothing)


@runtime_checkable
class RealtimeTransport(Protocol):
    """A transport the gateway also pushes rows through (the WebSocket one): the sync engine
    applies ``on_broadcast`` rows as they come and pulls on every ``on_resync``."""

    def on_broadcast(self, listener: Callable[[list[RemoteRow], int], None]) -> None:
        """Call ``listener(rows, server_hlc)`` for every broadcast."""
        ...

    def on_resync(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` when the client should pull from its cursor: after every
        (re)connection, and periodically while connected (the heartbeat)."""
        ...


@runtime_checkable
class Transport(Protocol):
    """How the sync engine talks to a gateway."""

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        """Send a batch; the gateway accepts it whole or rejects it whole."""
        ...

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        """Fetch the next page of rows changed after cursor ``since`` (stamped format) — of the
        gateway's own rows, or of the named ``source``'s."""
        ...

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        """The initial-sync checkpoint (stamped rows) for ``client_id``, or ``None`` when the
        gateway offers none."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


class _Refusal(Protocol):
    """A delta an embedded push refused, and the error that says why."""

    @property
    def delta(self) -> RowDelta: ...

    @property
    def error(self) -> Any: ...


class _PushOutcome(Protocol):
    """What an embedded push answers: the cursor to report, the deltas accepted and refused."""

    @property
    def server_hlc(self) -> int: ...

    @property
    def accepted(self) -> int: ...

    @property
    def refused(self) -> Sequence[_Refusal]: ...


class _PulledPage(Protocol):
    """What an embedded pull answers: the deltas as wire objects, the cursor, ``has_more``."""

    @property
    def deltas(self) -> list[dict[str, Any]]: ...

    @property
    def server_hlc(self) -> int: ...

    @property
    def has_more(self) -> bool: ...


class EmbeddedSyncService(Protocol):
    """The part of the gateway's sync engine an :class:`InProcessTransport` calls."""

    def push(
        self,
        gw: str,
        client_id: str,
        deltas: Sequence[RowDelta],
        *,
        claims: Claims | None = ...,
    ) -> _PushOutcome:
        """Accept a batch whole or reject it whole."""
        ...

    def pull(
        self,
        gw: str,
        client_id: str,
        since: int,
        limit: int,
        *,
        claims: Claims | None = ...,
        stamped: bool = ...,
    ) -> _PulledPage:
        """One page of rows changed after cursor ``since``."""
        ...

    def pull_source(
        self,
        gw: str,
        source: str,
        log: Any,
        client_id: str,
        since: int,
        limit: int,
        *,
        claims: Claims | None = ...,
        stamped: bool = ...,
    ) -> _PulledPage:
        """One page of source ``source`` (read through ``log``) after source cursor ``since``."""
        ...


class _ServedCheckpoint(Protocol):
    """What an embedded checkpoint answers: the cursor to resume from and the frames."""

    @property
    def cursor(self) -> int: ...

    @property
    def frames(self) -> Iterator[bytes]: ...


class EmbeddedCheckpoints(Protocol):
    """The sync engine's checkpoint serving, as an :class:`InProcessTransport` calls it."""

    def checkpoint(
        self,
        gw: str,
        client_id: str | None,
        store: CheckpointStore,
        *,
        claims: Claims | None = ...,
        stamped: bool = ...,
    ) -> _ServedCheckpoint | None:
        """The checkpoint in ``store`` as ``client_id`` may see it (``None``: none)."""
        ...


class InProcessTransport:
    """A transport that calls the sync engine in this process (no HTTP, no auth).

    ``claims`` are the sync-rule claims the caller would carry in its token (``sub`` defaults
    to the pushing client id); ``checkpoints`` is the store the gateway's checkpoints are read
    from (the service then serves them, as over HTTP), or ``checkpoint`` supplies snapshots
    itself; ``sources`` are the delta logs :meth:`pull` may name (an
    ``adapters.source.DeltaSource`` each).
    """

    def __init__(
        self,
        service: EmbeddedSyncService,
        gateway_id: str,
        *,
        claims: Mapping[str, str | Sequence[str]] | None = None,
        checkpoint: Callable[[], Checkpoint | None] | None = None,
        sources: Mapping[str, Any] | None = None,
        checkpoints: CheckpointStore | None = None,
    ) -> None:
        self.service = service
        self.gateway_id = gateway_id
        self._claims = dict(claims or {})
        self._checkpoint = checkpoint
        self._sources = dict(sources or {})
        self._checkpoints = checkpoints

    def _claims_for(self, client_id: str) -> dict[str, str | tuple[str, ...]]:
        claims: dict[str, str | tuple[str, ...]] = {"sub": client_id}
        for key, value in self._claims.items():
            claims[key] = value if isinstance(value, str) else tuple(value)
        return claims

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        """Push through ``SyncService.push``."""
        result = self.service.push(
            self.gateway_id, client_id, deltas, claims=self._claims_for(client_id)
        )
        refused = tuple(
            RefusedWrite(
                r.delta.delta_id, r.delta.table, r.delta.row_id, r.error.code, r.error.message
            )
            for r in result.refused
        )
        return PushAck(result.server_hlc, result.accepted, refused)

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        """Pull a stamped page through ``SyncService.pull`` (``pull_source`` for a source)."""
        claims = self._claims_for(client_id)
        if source is None:
            page = self.service.pull(
                self.gateway_id, client_id, since, limit, claims=claims, stamped=True
            )
        else:
            if source not in self._sources:
                raise SourceNotFoundError(f'Source adapter "{source}" not found')
            page = self.service.pull_source(
                self.gateway_id,
                source,
                self._sources[source],
                client_id,
                since,
                limit,
                claims=claims,
                stamped=True,
            )
        return PullResponse(parse_remote_rows(page.deltas), page.server_hlc, page.has_more)

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        """The injected snapshot, or the service's stamped checkpoint from ``checkpoints``
        (``None`` without either, or when the store holds none)."""
        if self._checkpoint is not None:
            return self._checkpoint()
        serve = getattr(self.service, "checkpoint", None)
        if self._checkpoints is None or serve is None:
            return None
        engine: EmbeddedCheckpoints = self.service  # type: ignore[assignment]
        claims = self._claims_for(client_id) if client_id is not None else dict(self._claims)
        served = engine.checkpoint(
            self.gateway_id, client_id, self._checkpoints, claims=claims, stamped=True
        )
        if served is None:
            return None
        batches = (b for f in read_frames(served.frames) for b in checkpoint_batches(f))
        return Checkpoint(served.cursor, batches)

    def close(self) -> None:
        """Nothing to release (the service belongs to the caller)."""


class OfflineTransport:
    """The transport of a client created without a gateway: every call raises."""

    def _fail(self) -> TransportError:
        return TransportError("no gateway configured for this client")

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        """Always raises :class:`TransportError`."""
        raise self._fail()

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        """Always raises :class:`TransportError`."""
        raise self._fail()

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        """No checkpoint."""
        return None

    def close(self) -> None:
        """Nothing to release."""
