"""Protocol v1 over HTTP JSON (PROTOCOL.md §4), with :mod:`httpx`.

* ``push`` → ``POST {url}/v1/sync/{gw}/push``; ``pull`` → ``GET .../pull?format=stamped``;
  ``execute_actions`` → ``POST .../action``; ``describe_actions`` → ``GET .../actions``;
  ``checkpoint`` → ``GET .../checkpoint?format=stamped`` (404 = no checkpoint; otherwise a
  stream of big-endian ``uint32`` length-prefixed protobuf ``StampedSyncResponse`` frames,
  header ``X-Checkpoint-Hlc``, §6).
* ``Authorization: Bearer`` from a static ``token`` or ``get_token()``; on a 401 the token is
  fetched again and the request retried once.
* Connection failures and timeouts (:class:`httpx.TransportError`) are retried ``retries``
  times by :mod:`tenacity`, after 0.1 s, 0.2 s, 0.4 s, … (at most :data:`RETRY_WAIT_MAX_S`); a
  push retried after a timeout is safe because the gateway deduplicates by ``deltaId`` (the
  batch is sent again byte for byte, never re-stamped), and so is a request of actions (same
  ``actionId`` and ``idempotencyKey``: the gateway runs each once). Answers are not retried
  here: a 429 or 503 goes back to the outbox, which retries it later and honours
  ``Retry-After``.
* A checkpoint frame that does not decode raises ``CodecError`` (a ``ValidationError``): the
  engine then reports it and pulls from the start instead. Checkpoints are asked for with
  ``format=stamped`` (per-column stamps) and read one frame at a time.
* Error responses become the exception with the envelope's ``code``
  (:func:`~lakesync_platform.client._errors.error_from_envelope`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import msgspec
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from ..core.actions import Action, action_result_from_json
from ..core.checkpoint import CHECKPOINT_MEDIA_TYPE
from ..core.delta import RowDelta
from ..core.wire import delta_to_wire
from ._actions import ActionResponse
from ._errors import TransportError, error_from_envelope
from ._transport import Checkpoint, PullResponse, PushAck, RefusedWrite
from ._wire import CheckpointBatch, checkpoint_batches, decode_pull_body, read_frames

__all__ = [
    "CHECKPOINT_MEDIA_TYPE",
    "RETRY_WAIT_MAX_S",
    "RETRY_WAIT_S",
    "HttpTransport",
    "read_frames",
]

RETRY_WAIT_S = 0.1
"""The pause before the first retry of a failed connection; it doubles with each retry."""
RETRY_WAIT_MAX_S = 5.0
"""The longest pause between two retries."""

_encoder = msgspec.json.Encoder()


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        raise TransportError(f"gateway sent invalid JSON (HTTP {response.status_code})") from None
    if not isinstance(data, dict):
        raise TransportError("gateway sent a JSON body that is not an object")
    return data


def _int(value: object, what: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise TransportError(f"gateway sent an invalid {what}: {value!r}") from None


class HttpTransport:
    """A :class:`~lakesync_platform.client.Transport` over HTTP."""

    def __init__(
        self,
        url: str,
        gateway_id: str,
        *,
        token: str | None = None,
        get_token: Callable[[], str] | None = None,
        timeout_s: float = 10.0,
        retries: int = 2,
        api_prefix: str = "/v1",
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.gateway_id = gateway_id
        self._token = token
        self._get_token = get_token
        self._retrying = Retrying(
            retry=retry_if_exception_type(httpx.TransportError),
            stop=stop_after_attempt(retries + 1),
            wait=wait_exponential(multiplier=RETRY_WAIT_S, max=RETRY_WAIT_MAX_S),
            sleep=sleep,
            reraise=True,
        )
        self._base = f"{self.url}{api_prefix}"
        self._client = client or httpx.Client(timeout=timeout_s)
        self._owns_client = client is None

    def _auth(self, refresh: bool = False) -> dict[str, str]:
        if self._get_token is not None and (refresh or self._token is None):
            self._token = self._get_token()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _send(
        self, build: Callable[[dict[str, str]], httpx.Request], stream: bool = False
    ) -> httpx.Response:
        """Send the request ``build(auth headers)`` (retried on connection failures); on a 401
        fetch the token again and send it once more."""

        def attempt() -> httpx.Response:
            return self._client.send(build(self._auth()), stream=stream)

        try:
            response = self._retrying(attempt)
            if response.status_code == 401 and self._get_token is not None:
                response.close()
                self._auth(refresh=True)
                response = self._retrying(attempt)
        except httpx.TransportError as exc:
            raise TransportError(f"{exc.request.method} {exc.request.url}: {exc!r}") from exc
        return response

    @staticmethod
    def _raise_for(response: httpx.Response) -> None:
        if response.is_success:
            return
        response.read()
        try:
            body: object = response.json()
        except ValueError:
            body = None
        raise error_from_envelope(response.status_code, body, response.headers.get("Retry-After"))

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushAck:
        """``POST /v1/sync/{gw}/push``."""
        body = _encoder.encode(
            {
                "clientId": client_id,
                "deltas": [delta_to_wire(d) for d in deltas],
                "lastSeenHlc": str(last_seen_hlc),
            }
        )
        url = f"{self._base}/sync/{self.gateway_id}/push"
        response = self._send(
            lambda auth: self._client.build_request(
                "POST",
                url,
                content=body,
                headers={**auth, "Content-Type": "application/json"},
            )
        )
        self._raise_for(response)
        data = _json(response)
        return PushAck(
            _int(data.get("serverHlc", 0), "serverHlc"),
            int(data.get("accepted", 0)),
            refused_writes(data.get("refused")),
        )

    def pull(
        self, client_id: str, since: int, limit: int, source: str | None = None
    ) -> PullResponse:
        """``GET /v1/sync/{gw}/pull?format=stamped`` (``&source=NAME`` for a source)."""
        url = f"{self._base}/sync/{self.gateway_id}/pull"
        params = {
            "since": str(since),
            "clientId": client_id,
            "limit": str(limit),
            "format": "stamped",
        }
        if source is not None:
            params["source"] = source
        response = self._send(
            lambda auth: self._client.build_request("GET", url, params=params, headers=auth)
        )
        self._raise_for(response)
        try:
            body = decode_pull_body(response.content)
        except msgspec.DecodeError:
            raise TransportError(
                f"gateway sent an invalid pull page: {response.text[:200]!r}"
            ) from None
        return PullResponse(body.deltas, body.server_hlc, body.has_more)

    def checkpoint(self, client_id: str | None = None) -> Checkpoint | None:
        """``GET /v1/sync/{gw}/checkpoint?format=stamped``; ``None`` on 404 (no checkpoint yet).

        The rows arrive one frame at a time as the returned :class:`Checkpoint`'s batches are
        read; a connection lost mid-stream raises :class:`TransportError` from them.
        """
        url = f"{self._base}/sync/{self.gateway_id}/checkpoint"
        params = {"format": "stamped", **({"clientId": client_id} if client_id else {})}
        response = self._send(
            lambda auth: self._client.build_request(
                "GET", url, params=params, headers={**auth, "Accept": CHECKPOINT_MEDIA_TYPE}
            ),
            stream=True,
        )
        try:
            if response.status_code == 404:
                response.close()
                return None
            self._raise_for(response)
            header = response.headers.get("X-Checkpoint-Hlc")
            snapshot = _int(header, "X-Checkpoint-Hlc") if header else 0
        except BaseException:
            response.close()
            raise

        def batches() -> Iterator[CheckpointBatch]:
            try:
                for frame in read_frames(response.iter_bytes()):
                    yield from checkpoint_batches(frame)
            except httpx.HTTPError as exc:
                raise TransportError(f"checkpoint download failed: {exc!r}") from exc
            finally:
                response.close()

        return Checkpoint(snapshot, batches(), response.close)

    def execute_actions(self, client_id: str, actions: Sequence[Action]) -> ActionResponse:
        """``POST /v1/sync/{gw}/action``: one result per action, in order."""
        body = _encoder.encode({"clientId": client_id, "actions": [a.to_json() for a in actions]})
        url = f"{self._base}/sync/{self.gateway_id}/action"
        response = self._send(
            lambda auth: self._client.build_request(
                "POST", url, content=body, headers={**auth, "Content-Type": "application/json"}
            )
        )
        self._raise_for(response)
        data = _json(response)
        try:
            results = [action_result_from_json(r) for r in data["results"]]
        except (KeyError, TypeError, ValueError):
            raise TransportError(f"gateway sent invalid action results: {data!r:.200}") from None
        return ActionResponse(results, _int(data.get("serverHlc", 0), "serverHlc"))

    def describe_actions(self) -> dict[str, Any]:
        """``GET /v1/sync/{gw}/actions``: ``{"connectors": {name: [descriptor]}}``."""
        url = f"{self._base}/sync/{self.gateway_id}/actions"
        response = self._send(lambda auth: self._client.build_request("GET", url, headers=auth))
        self._raise_for(response)
        return _json(response)

    def close(self) -> None:
        """Close the HTTP connection pool (if this transport created it)."""
        if self._owns_client:
            self._client.close()


def refused_writes(raw: Any) -> tuple[RefusedWrite, ...]:
    """The ``refused`` list of a push answer (absent: none)."""
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise TransportError("gateway answered a push with a malformed 'refused' list")
    try:
        return tuple(
            RefusedWrite(
                str(r["deltaId"]), str(r["table"]), str(r["rowId"]), str(r["code"]), str(r["error"])
            )
            for r in raw
        )
    except (KeyError, TypeError) as exc:
        raise TransportError("gateway answered a push with a malformed 'refused' list") from exc
