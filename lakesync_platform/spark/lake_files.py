"""Files in the lake's warehouse, listed and deleted through pyiceberg's file I/O.

The Iceberg Java ``FileIO`` (``listPrefix``, ``deletePrefix``) is out of reach of a Spark
Connect client; pyiceberg's :class:`~pyiceberg.io.pyarrow.PyArrowFileIO`, configured from the
same catalog properties (``s3.*`` included), hands out the pyarrow filesystem of a location,
which lists and deletes folders on a local disk and on S3 alike. A listing spells each file as the
folder was spelled, so paths compare with the table's own ``location``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

__all__ = ["LakeFile", "delete_prefix", "list_prefix"]


@dataclass(frozen=True, slots=True)
class LakeFile:
    """A file under a listed folder: its location and when it was last modified (ms)."""

    location: str
    modified_ms: int


def _fs_and_path(io: FileIO, location: str) -> tuple[Any, str]:
    """The pyarrow filesystem of ``location`` and its path there."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if not isinstance(io, PyArrowFileIO):
        raise TypeError(f"listing needs pyiceberg's PyArrowFileIO, not {type(io).__name__}")
    scheme, netloc, path = io.parse_location(location, io.properties)
    return io.fs_by_scheme(scheme, netloc), path


def list_prefix(io: FileIO, location: str) -> Iterator[LakeFile]:
    """Every file under the folder ``location`` (none when it does not exist), each spelled as
    ``location`` plus its path below it (``file:///x`` stays ``file:///x/…``)."""
    from pyarrow import fs as pafs

    root = location.rstrip("/")
    fs, path = _fs_and_path(io, root)
    path = path.rstrip("/")
    selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type == pafs.FileType.File and info.path.startswith(path + "/"):
            modified = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
            yield LakeFile(root + info.path[len(path) :], modified)


def delete_prefix(io: FileIO, location: str) -> None:
    """Delete the folder ``location`` with everything in it (nothing when it does not exist)."""
    from pyarrow import fs as pafs

    fs, path = _fs_and_path(io, location.rstrip("/"))
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)
