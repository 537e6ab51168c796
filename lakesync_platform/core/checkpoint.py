"""Initial-sync checkpoints: the manifest, the names of the stored objects, and the store port.

A checkpoint (PROTOCOL.md §6, ARCHITECTURE.md §4) is every live row of a gateway at one ingest
cursor ``C``, written by the pipeline as **chunk** objects plus a **manifest**, all under
``<root>/<gw>/``:

* ``chunk-<C>-<NNN>.bin`` — one ``lakesync.platform.v1.StampedSyncResponse`` each
  (:mod:`.stamped`) with ``server_hlc = C``: live rows of *one* table, column by column, with
  every column's stamp, each row's delete stamp and its position (the reference's chunk is a
  ``lakesync.v1.SyncResponse`` of bare ``INSERT``\\ s, which carries neither the stamps our
  client keeps nor what its decoding speed needs; the TS client still gets that message, in
  the stream's frames);
* ``manifest.json`` — the current checkpoint: the reference's fields (``snapshotHlc``,
  ``generatedAt``, ``chunkCount``, ``totalDeltas``, ``chunks``) plus ours (:class:`Manifest`);
* ``manifest-<C>.json`` — a copy of each published manifest, which says which chunks and
  Iceberg tags belong to an older checkpoint until it is removed.

A new checkpoint writes its chunks under new names, then its manifest copy, then replaces
``manifest.json`` in one write (write-then-swap): a reader that read the old manifest keeps
finding the old chunks, which are removed only a grace period after they were superseded.

:class:`CheckpointStore` is the port the pipeline writes through and the gateway reads through
(a local folder or an S3 bucket, :mod:`lakesync_platform.adapters.checkpoints`). Nothing here
does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Final, Protocol

import msgspec

from .errors import ValidationError

__all__ = [
    "CHECKPOINT_MEDIA_TYPE",
    "CHECKPOINT_TAG_PREFIX",
    "CURRENT_MANIFEST",
    "REFERENCE_FORMAT",
    "STAMPED_FORMAT",
    "CheckpointStore",
    "ChunkInfo",
    "Manifest",
    "StoredObject",
    "TableSnapshot",
    "archived_manifest",
    "checkpoint_tag",
    "chunk_cursor",
    "chunk_name",
    "decode_manifest",
    "encode_manifest",
    "length_prefix",
    "manifest_cursor",
]

CHECKPOINT_MEDIA_TYPE: Final = "application/x-lakesync-checkpoint-stream"
"""The content type of the served stream (and what the TS client sends as ``Accept``)."""
CURRENT_MANIFEST: Final = "manifest.json"
"""The name of the current checkpoint's manifest (the reference's)."""
CHECKPOINT_TAG_PREFIX: Final = "lakesync-checkpoint-"
"""Iceberg tags ``lakesync-checkpoint-<C>`` pin the snapshots a checkpoint was read from."""
STAMPED_FORMAT: Final = "lakesync.platform.v1.StampedSyncResponse"
"""The message type of our chunks (:mod:`.stamped`)."""
REFERENCE_FORMAT: Final = "lakesync.v1.SyncResponse"
"""The message type of the reference's chunks: a manifest without ``format`` names it."""

_CHUNK = re.compile(r"^chunk-(\d+)-\d+\.bin$")
_ARCHIVED = re.compile(r"^manifest-(\d+)\.json$")


def chunk_name(cursor: int, index: int) -> str:
    """The name of chunk ``index`` of the checkpoint at ``cursor``."""
    return f"chunk-{cursor}-{index:03d}.bin"


def chunk_cursor(name: str) -> int | None:
    """The cursor of the checkpoint a chunk name belongs to (``None``: not a chunk name)."""
    match = _CHUNK.match(name)
    return None if match is None else int(match.group(1))


def archived_manifest(cursor: int) -> str:
    """The name of the kept copy of the manifest of the checkpoint at ``cursor``."""
    return f"manifest-{cursor}.json"


def manifest_cursor(name: str) -> int | None:
    """The cursor of a kept manifest copy's name (``None``: not one)."""
    match = _ARCHIVED.match(name)
    return None if match is None else int(match.group(1))


def checkpoint_tag(cursor: int) -> str:
    """The Iceberg tag that pins the snapshots the checkpoint at ``cursor`` was read from."""
    return f"{CHECKPOINT_TAG_PREFIX}{cursor}"


def length_prefix(size: int) -> bytes:
    """The ``uint32`` big-endian length that precedes every frame of the served stream."""
    return size.to_bytes(4, "big")


class ChunkInfo(msgspec.Struct, frozen=True, rename="camel"):
    """One chunk: its name, the one table its rows belong to, how many rows and bytes."""

    name: str
    table: str
    rows: int
    bytes: int


class TableSnapshot(msgspec.Struct, frozen=True, rename="camel"):
    """The Iceberg state table a checkpoint read one table from, and at which snapshot."""

    table: str
    snapshot_id: int
    rows: int


class Manifest(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """A checkpoint's manifest.

    The reference's fields: ``snapshot_hlc`` (the cursor ``C`` as decimal text — the pull
    cursor a client resumes from), ``generated_at`` (ISO 8601), ``chunk_count``,
    ``total_deltas`` (live rows) and ``chunks`` (names, in serving order). Ours: ``format``
    (the chunks' message type; absent in the reference's manifests, which hold
    :data:`REFERENCE_FORMAT` chunks), ``chunk_info`` (one per chunk, same order), ``tables`` (the
    state snapshots read, tagged ``tag``) and ``seconds`` (how long generation took).
    """

    snapshot_hlc: str
    generated_at: str
    chunk_count: int
    total_deltas: int
    chunks: list[str]
    format: str = REFERENCE_FORMAT
    chunk_info: list[ChunkInfo] = msgspec.field(default_factory=list)
    tables: list[TableSnapshot] = msgspec.field(default_factory=list)
    tag: str = ""
    total_bytes: int = 0
    seconds: float = 0.0

    @property
    def cursor(self) -> int:
        """The ingest cursor ``C`` every row is as of."""
        return int(self.snapshot_hlc)


def encode_manifest(manifest: Manifest) -> bytes:
    """The manifest as stored (JSON)."""
    return msgspec.json.encode(manifest)


def decode_manifest(data: bytes) -> Manifest:
    """Parse a stored manifest; a malformed one is a :class:`ValidationError`."""
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.DecodeError as exc:
        raise ValidationError(f"malformed checkpoint manifest: {exc}") from None
    if not manifest.snapshot_hlc.isdigit():
        raise ValidationError(
            f"malformed checkpoint manifest: snapshotHlc {manifest.snapshot_hlc!r}"
        )
    if manifest.format == STAMPED_FORMAT and (
        len(manifest.chunk_info) != len(manifest.chunks)
        or any(
            info.name != name
            for info, name in zip(manifest.chunk_info, manifest.chunks, strict=False)
        )
    ):
        raise ValidationError("malformed checkpoint manifest: chunkInfo does not match chunks")
    return manifest


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object of a gateway's checkpoint folder: its name, size and last change (epoch ms)."""

    name: str
    size: int
    modified_ms: int


class CheckpointStore(Protocol):
    """Where checkpoints live: one folder per gateway id (a local directory or an S3 prefix).

    Failures of the storage are raised as :class:`~.errors.AdapterError`.
    """

    @property
    def location(self) -> str:
        """Where the store's root is (a path or URI), for messages."""
        ...

    def read(self, gw: str, name: str) -> bytes | None:
        """The whole object ``name`` of ``gw``'s folder, or ``None`` when it does not exist."""
        ...

    def open(self, gw: str, name: str) -> AbstractContextManager[IO[bytes]]:
        """A stream over object ``name`` (missing: :class:`~.errors.AdapterError`)."""
        ...

    def write(self, gw: str, name: str, data: bytes) -> None:
        """Write object ``name`` whole; readers see the old object or the new one, never part."""
        ...

    def delete(self, gw: str, names: Sequence[str]) -> None:
        """Delete objects (missing ones are ignored)."""
        ...

    def list(self, gw: str) -> list[StoredObject]:
        """Every object of ``gw``'s folder (none when it does not exist)."""
        ...
