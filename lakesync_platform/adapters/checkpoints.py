"""Where checkpoints are stored: a local folder or an S3-compatible bucket.

Both implement :class:`~lakesync_platform.core.checkpoint.CheckpointStore` — one folder per
gateway id under a root, whole-object writes that readers never see half done:

* :class:`LocalCheckpointStore` (``<data-dir>/checkpoints``, the embedded default): a write goes
  to a temporary file in the same folder, is flushed to disk and renamed over the target
  (``os.replace`` is atomic on POSIX);
* :class:`ObjectCheckpointStore` (``s3://bucket/prefix``): pyarrow's S3 filesystem, configured
  from the same values as the lake's (the standard ``AWS_*`` variables, a custom endpoint for
  R2/MinIO addressed path-style); an S3 ``PUT`` replaces an object whole.

:func:`open_checkpoint_store` picks one from the root's scheme. Storage failures become
:class:`~lakesync_platform.core.errors.AdapterError`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from ..core.checkpoint import StoredObject
from ..core.errors import AdapterError
from ..core.identifiers import check_gateway_id

__all__ = [
    "TMP_MARK",
    "LocalCheckpointStore",
    "ObjectCheckpointStore",
    "open_checkpoint_store",
]

TMP_MARK = ".tmp-"
"""Marks the temporary file of a write in progress (or of one a crash interrupted)."""


def _name(name: str) -> str:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"not a checkpoint object name: {name!r}")
    return name


class LocalCheckpointStore:
    """Checkpoints in a local folder: ``<root>/<gw>/<name>``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def location(self) -> str:
        """The root folder."""
        return str(self.root)

    def _path(self, gw: str, name: str = "") -> Path:
        folder = self.root / check_gateway_id(gw)
        return folder / _name(name) if name else folder

    def read(self, gw: str, name: str) -> bytes | None:
        """The whole object, or ``None`` when it does not exist."""
        try:
            return self._path(gw, name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise AdapterError(f"cannot read checkpoint object {name} of {gw}: {exc}") from exc

    @contextmanager
    def open(self, gw: str, name: str) -> Iterator[IO[bytes]]:
        """A stream over the object."""
        try:
            stream = self._path(gw, name).open("rb")
        except OSError as exc:
            raise AdapterError(f"cannot open checkpoint object {name} of {gw}: {exc}") from exc
        with stream:
            yield stream

    def write(self, gw: str, name: str, data: bytes) -> None:
        """Write to a temporary file, flush it to disk, rename it over ``name``."""
        target = self._path(gw, name)
        tmp = target.with_name(f"{name}{TMP_MARK}{uuid.uuid4().hex}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
            folder = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(folder)  # the rename itself survives a crash
            finally:
                os.close(folder)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise AdapterError(f"cannot write checkpoint object {name} of {gw}: {exc}") from exc

    def delete(self, gw: str, names: Sequence[str]) -> None:
        """Delete objects; missing ones are ignored."""
        for name in names:
            try:
                self._path(gw, name).unlink(missing_ok=True)
            except OSError as exc:
                raise AdapterError(f"cannot delete checkpoint object {name}: {exc}") from exc

    def list(self, gw: str) -> list[StoredObject]:
        """Every object of the gateway's folder (temporary files of interrupted writes too)."""
        folder = self._path(gw)
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise AdapterError(f"cannot list checkpoints in {folder}: {exc}") from exc
        found = []
        for entry in entries:
            if entry.is_file():
                stat = entry.stat()
                found.append(StoredObject(entry.name, stat.st_size, int(stat.st_mtime * 1000)))
        return sorted(found, key=lambda o: o.name)


class ObjectCheckpointStore:
    """Checkpoints in an S3-compatible bucket: ``s3://bucket/prefix/<gw>/<name>``, through
    ``pyarrow.fs.S3FileSystem`` (``pyarrow``, from the ``pipeline`` extra)."""

    def __init__(self, root: str, filesystem: Any) -> None:
        parsed = urlparse(root)
        self._root = root.rstrip("/")
        self._base = f"{parsed.netloc}{parsed.path}".rstrip("/")
        self._fs = filesystem

    @classmethod
    def connect(
        cls,
        root: str,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
    ) -> ObjectCheckpointStore:
        """A store at ``root`` (``s3://bucket/prefix``); ``None`` values are left to the AWS
        SDK's own lookup (profiles, instance roles). With an ``endpoint`` buckets are addressed
        path-style (what MinIO and local servers need)."""
        try:
            from pyarrow import fs
        except ImportError as exc:  # the gateway's base install has no pyarrow
            raise AdapterError(
                "checkpoints in object storage need pyarrow: "
                "pip install 'lakesync-platform[pipeline]'"
            ) from exc
        options: dict[str, Any] = {}
        if endpoint:
            parsed = urlparse(endpoint)
            options["endpoint_override"] = parsed.netloc or parsed.path
            options["scheme"] = parsed.scheme or "https"
        if region:
            options["region"] = region
        if access_key_id and secret_access_key:
            options.update(access_key=access_key_id, secret_key=secret_access_key)
            if session_token:
                options["session_token"] = session_token
        return cls(root, fs.S3FileSystem(**options))

    @property
    def location(self) -> str:
        """The root URI."""
        return self._root

    def _path(self, gw: str, name: str = "") -> str:
        folder = f"{self._base}/{check_gateway_id(gw)}"
        return f"{folder}/{_name(name)}" if name else folder

    def read(self, gw: str, name: str) -> bytes | None:
        """The whole object, or ``None`` when it does not exist."""
        try:
            with self._fs.open_input_stream(self._path(gw, name)) as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise AdapterError(f"cannot read {self._root}/{gw}/{name}: {exc}") from exc

    @contextmanager
    def open(self, gw: str, name: str) -> Iterator[IO[bytes]]:
        """A stream over the object (read in parts as it is consumed)."""
        try:
            stream = self._fs.open_input_stream(self._path(gw, name))
        except OSError as exc:
            raise AdapterError(f"cannot open {self._root}/{gw}/{name}: {exc}") from exc
        with stream:
            yield stream

    def write(self, gw: str, name: str, data: bytes) -> None:
        """Upload the object whole (it appears when the upload completes)."""
        try:
            with self._fs.open_output_stream(self._path(gw, name)) as out:
                out.write(data)
        except OSError as exc:
            raise AdapterError(f"cannot write {self._root}/{gw}/{name}: {exc}") from exc

    def delete(self, gw: str, names: Sequence[str]) -> None:
        """Delete objects; missing ones are ignored."""
        for name in names:
            try:
                self._fs.delete_file(self._path(gw, name))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise AdapterError(f"cannot delete {self._root}/{gw}/{name}: {exc}") from exc

    def list(self, gw: str) -> list[StoredObject]:
        """Every object under the gateway's prefix."""
        from pyarrow import fs

        try:
            infos = self._fs.get_file_info(fs.FileSelector(self._path(gw), allow_not_found=True))
        except OSError as exc:
            raise AdapterError(f"cannot list {self._root}/{gw}: {exc}") from exc
        return sorted(
            (
                StoredObject(
                    info.base_name,
                    int(info.size or 0),
                    int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0,
                )
                for info in infos
                if info.type == fs.FileType.File
            ),
            key=lambda o: o.name,
        )


def open_checkpoint_store(
    root: str,
    *,
    endpoint: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
) -> LocalCheckpointStore | ObjectCheckpointStore:
    """The store at ``root``: ``s3://…`` (or ``s3a://``) in a bucket, anything else a local
    folder (a path or a ``file://`` URI)."""
    scheme = urlparse(root).scheme
    if scheme in ("s3", "s3a"):
        return ObjectCheckpointStore.connect(
            "s3://" + root.split("://", 1)[1],
            endpoint=endpoint,
            region=region,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
        )
    if scheme == "file":
        return LocalCheckpointStore(Path(urlparse(root).path))
    if scheme:
        raise ValueError(f"unsupported checkpoint location {root!r} (a path, file:// or s3://)")
    return LocalCheckpointStore(Path(root))
