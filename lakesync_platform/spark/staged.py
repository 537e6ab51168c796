"""Connector tables replaced whole: a staging table swapped in by catalog operations.

The ``diff`` strategy's snapshots (:mod:`.connector_diff`) and the census's known ids
(:mod:`.connector_census`) are each one Iceberg table that every run replaces whole. A run
writes the new content into a *staging* table beside it; once the WAL committed what the
comparison found, the staging table becomes the table — by catalog operations only, no row
copied:

1. :meth:`StagedSwap.mark_ready` — one commit on the staging table: ``lakesync.staged`` =
   ``ready`` (and whatever else the owner records, such as the census's ``known-through``);
2. :meth:`StagedSwap.swap` — the old table dropped, then its folder deleted (one recursive
   delete), the staging table renamed to its name, then :meth:`StagedSwap.sweep`.

Each staging table is created in a folder of its own, a *generation*:
``<namespace>/_ls-tables/<table>/<generation id>/`` (``-`` never occurs in a table name, so no
lake table's folder holds these). Iceberg's rename moves no file, and the next staging table
gets a fresh folder, so no two tables ever share one. :meth:`StagedSwap.sweep` deletes every
generation folder of the table that neither it nor its staging table uses: the files of a
staging table whose run died before its commit, and of a drop that died before its folder
was deleted; and the folders ``<namespace>/<table>`` and ``<namespace>/<table>__staging``
where a release before generations kept these tables (and leaked the staging table's files,
dropped without ``PURGE``), once no table uses them. The warehouse holds one generation per
table between runs, two during one — however many runs there were.

**Crash points.** A run can die anywhere; the next run finds the staging table and
:meth:`StagedSwap.staged` tells it which case it is in:

* no staging table — nothing was left half done (a staging folder without a table is swept);
* staging ``ready`` — the run died after the WAL committed and after the mark, before or
  during the swap (with or without the old table, renamed or not): the next run finishes the
  swap (:meth:`StagedSwap.swap` is idempotent step by step);
* staging not ready — the run died before its changes were all committed. What to do is the
  owner's call: the census discards it (its known ids include every id appended since), the
  ``diff`` strategy first marks the rows it may have sent as unknown, then swaps it in.

These tables are the connectors' own: lake upkeep (:mod:`lakesync_platform.pipeline.upkeep`)
leaves them alone — each holds a single snapshot, written once, and is dropped whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .lake_files import delete_prefix, list_prefix
from .layout import namespace, q, table_exists
from .snapshots import load_table

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyspark.sql import SparkSession

__all__ = ["GENERATIONS", "READY", "STAGED_PROP", "Staged", "StagedSwap"]

STAGED_PROP = "lakesync.staged"
"""Table property of a staging table: ``writing`` while its run works, ``ready`` once the WAL
committed everything its comparison found."""
READY = "ready"
GENERATIONS = "_ls-tables"
"""The folder, in a namespace's folder, that holds the generations of connector tables."""
_TBL_PROPS = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.parquet.compression-level": "1",
    "write.metadata.delete-after-commit.enabled": "true",
}


@dataclass(frozen=True, slots=True)
class Staged:
    """A staging table as found: its properties and the records of its current snapshot
    (``None`` while it has none: created, never written)."""

    properties: dict[str, str]
    records: int | None

    @property
    def ready(self) -> bool:
        """Whether its run committed everything (see the module docstring)."""
        return self.properties.get(STAGED_PROP) == READY


@dataclass
class StagedSwap:
    """The table ``name`` of gateway ``gw`` and its staging table ``<name>__staging``
    (``catalog``: pyiceberg over the session's catalog, for the tables' metadata and files)."""

    spark: SparkSession
    catalog: Catalog
    gw: str
    name: str
    _ns_location: str | None = field(default=None, repr=False)

    @property
    def target(self) -> str:
        """The table (quoted, qualified)."""
        return f"{namespace(self.gw)}.{q(self.name)}"

    @property
    def staging(self) -> str:
        """Its staging table (quoted, qualified)."""
        return f"{namespace(self.gw)}.{q(self.name + '__staging')}"

    def staged(self) -> Staged | None:
        """The staging table left by a run, or ``None``."""
        if not table_exists(self.spark, self.staging):
            return None
        table = load_table(self.catalog, self.staging)
        snapshot = table.current_snapshot()
        records = None
        if snapshot is not None:
            summary = {} if snapshot.summary is None else snapshot.summary.additional_properties
            records = int(summary.get("total-records") or 0)
        return Staged(dict(table.properties), records)

    def create_staging(self, columns: str, properties: Mapping[str, str] = {}) -> None:
        """A new, empty staging table (``columns``: Spark SQL column definitions) in a
        generation folder of its own; one left by an earlier run is dropped first (call once
        that run is recovered)."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(self.gw)}")
        self._drop(self.staging)
        props = {**_TBL_PROPS, **properties, STAGED_PROP: "writing"}
        listed = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        location = f"{self._generations()}/{uuid.uuid4().hex}"
        self.spark.sql(
            f"CREATE TABLE {self.staging} ({columns}) USING iceberg "
            f"LOCATION '{location}' TBLPROPERTIES ({listed})"
        )

    def mark_ready(self, properties: Mapping[str, str] = {}) -> None:
        """Mark the staging table ready (one commit), with ``properties`` beside the mark."""
        props = {**properties, STAGED_PROP: READY}
        listed = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        self.spark.sql(f"ALTER TABLE {self.staging} SET TBLPROPERTIES ({listed})")

    def swap(self) -> None:
        """The ready staging table becomes the table: the old one dropped with its files, the
        staging one renamed, stray generations swept. Safe to repeat after a crash at any
        step (a missing old table is not dropped; a missing staging table is not renamed)."""
        if table_exists(self.spark, self.staging):
            self._drop(self.target)
            # RENAME TO names the table within the catalog: namespace.name, no catalog part
            self.spark.sql(f"ALTER TABLE {self.staging} RENAME TO {self.target.split('.', 1)[1]}")
        self.sweep()

    def discard(self) -> None:
        """Drop the staging table with its files (its run's work is abandoned)."""
        self._drop(self.staging)
        self.sweep()

    def _drop(self, table: str) -> None:
        """Drop ``table`` if it exists, with its files: its generation folder whole, or, for a
        table of an earlier release (in a folder named after it), the files its metadata
        names (``PURGE``)."""
        if not table_exists(self.spark, table):
            return
        loaded = load_table(self.catalog, table)
        location = str(loaded.location()).rstrip("/")
        if not _normalized(location).startswith(_normalized(self._generations() + "/")):
            self.spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
            return
        self.spark.sql(f"DROP TABLE IF EXISTS {table}")  # then the folder, by one delete
        delete_prefix(loaded.io, location + "/")

    def sweep(self) -> int:
        """Delete the generation folders of this table that neither it nor its staging table
        uses (and an earlier release's folders of them); return how many generations went.
        A no-op until the table or its staging table exists (the lake's file I/O is reached
        through one of them)."""
        live = [t for t in (self.target, self.staging) if table_exists(self.spark, t)]
        if not live:
            return 0
        tables = [load_table(self.catalog, t) for t in live]
        keep = {str(t.location()).rstrip("/").rsplit("/", 1)[-1] for t in tables}
        io = tables[0].io
        root = f"{self._generations()}/"
        folders = _generation_folders(io, root)
        stray = sorted(gen for gen in folders if gen not in keep)
        for gen in stray:
            delete_prefix(io, folders[gen])
        in_use = {_normalized(str(t.location()).rstrip("/")) for t in tables}
        for legacy in (self.name, self.name + "__staging"):
            folder = f"{self._namespace_folder()}/{legacy}"
            if _normalized(folder) not in in_use:  # a release before generations left it
                delete_prefix(io, folder + "/")
        return len(stray)

    def _namespace_folder(self) -> str:
        """The namespace's folder (asked once)."""
        if self._ns_location is None:
            rows = self.spark.sql(f"DESCRIBE NAMESPACE {namespace(self.gw)}").collect()
            info = {str(r["info_name"]): str(r["info_value"]) for r in rows}
            self._ns_location = info["Location"].rstrip("/")
        return self._ns_location

    def _generations(self) -> str:
        """``<namespace folder>/_ls-tables/<name>``."""
        return f"{self._namespace_folder()}/{GENERATIONS}/{self.name}"


def _generation_folders(io: FileIO, root: str) -> dict[str, str]:
    """Generation id → its folder as the file I/O spells it, for every file under ``root``
    (none when the folder does not exist)."""
    marker = _normalized(root)
    found: dict[str, str] = {}
    for file in list_prefix(io, root):
        path = file.location
        at = path.find(marker)
        if at < 0:
            continue
        gen = path[at + len(marker) :].split("/", 1)[0]
        found.setdefault(gen, path[: at + len(marker)] + gen + "/")
    return found


def _normalized(location: str) -> str:
    """``location`` without its scheme and leading slashes (``file:///x`` and ``file:/x`` are
    one folder)."""
    return location.split(":", 1)[-1].lstrip("/")
