"""Named sources a client pulls from (``GET /v1/sync/{gw}/pull?source=NAME``, PROTOCOL.md §4.3).

A source is a store holding a LakeSync delta log — the reference's ``DatabaseAdapter`` role
(PROTOCOL.md §10.5): a ``lakesync_deltas`` table, idempotent inserts by ``delta_id``, the deltas
after a cursor, and a row's latest state. :class:`DeltaSource` is that role as a port; the pull
(:mod:`lakesync_platform.sync.source_pull`) reads a source only through it, so every kind pages,
filters and delivers the same way.

Kinds are registered in :data:`SOURCE_KINDS` (kind → factory of a :class:`SourceSpec`): a new
kind plugs in with one entry. ``postgres`` and ``mysql`` (MySQL/MariaDB) open a
:class:`~lakesync_platform.adapters.sql.SqlAdapter`, which implements the role natively;
``lake`` opens the lake's own change log (:class:`~lakesync_platform.adapters.lake.LakeSource`;
``url`` is the Iceberg catalog's SQLAlchemy URL, options ``warehouse`` and ``namespace``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

from ..core.delta import RowDelta
from ..core.errors import AdapterError
from .lake import LakeSource
from .sql import SqlAdapter

__all__ = [
    "SOURCE_KINDS",
    "DeltaSource",
    "SourceFactory",
    "SourceSpec",
    "close_source",
    "open_source",
]


class DeltaSource(Protocol):
    """A store holding a LakeSync delta log (the reference's ``DatabaseAdapter`` role)."""

    def ensure_delta_log(self) -> None:
        """Create the delta log (``lakesync_deltas``, PROTOCOL.md §10.5 DDL) if missing."""
        ...

    def insert_deltas(self, deltas: Sequence[RowDelta]) -> int:
        """Insert deltas, idempotent by ``delta_id``; return how many were new."""
        ...

    def deltas_since(
        self, since: int, tables: Sequence[str] | None = None, limit: int | None = None
    ) -> list[RowDelta]:
        """Deltas with ``hlc > since`` (of ``tables`` when given), ordered by
        ``(hlc, delta_id)``, at most ``limit``."""
        ...

    def latest_state(self, table: str, row_id: str) -> dict[str, Any] | None:
        """The row's current columns (PROTOCOL.md §3.5 merge); ``None`` when deleted/absent."""
        ...


@runtime_checkable
class _Closable(Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """A declared source, ready to open: ``url`` with ``${VAR}`` already expanded;
    ``options`` are the kind's own settings (e.g. a BigQuery project and dataset)."""

    name: str
    kind: str
    url: str
    options: Mapping[str, str] = field(default_factory=dict)


SourceFactory = Callable[[SourceSpec], DeltaSource]
"""Opens a source of one kind (no I/O beyond what the driver does lazily)."""


def _sql_source(spec: SourceSpec) -> DeltaSource:
    return SqlAdapter.connect(spec.url)


def _lake_source(spec: SourceSpec) -> DeltaSource:
    return LakeSource.connect(spec.url, spec.options["warehouse"], spec.options["namespace"])


def _bigquery_source(spec: SourceSpec) -> DeltaSource:
    """``url`` is ``bigquery://PROJECT/DATASET`` (the dataset holding ``lakesync_deltas``);
    options ``location`` and ``endpoint`` (an emulator) are optional."""
    from .bigquery import BigQueryAdapter  # google-cloud-bigquery only where it is declared

    parsed = urlparse(spec.url)
    dataset = parsed.path.strip("/")
    if parsed.scheme != "bigquery" or not parsed.netloc or not dataset or "/" in dataset:
        raise AdapterError(
            f"source {spec.name!r}: a bigquery url is bigquery://PROJECT/DATASET, not {spec.url!r}"
        )
    return BigQueryAdapter.connect(
        parsed.netloc,
        dataset,
        location=spec.options.get("location"),
        endpoint=spec.options.get("endpoint"),
    )


SOURCE_KINDS: dict[str, SourceFactory] = {
    "postgres": _sql_source,
    "mysql": _sql_source,
    "lake": _lake_source,
    "bigquery": _bigquery_source,
}
"""Every source kind and its factory; declarations accept exactly these kinds."""


def open_source(spec: SourceSpec) -> DeltaSource:
    """Open ``spec`` with its kind's factory (an unknown kind is an :class:`AdapterError`)."""
    factory = SOURCE_KINDS.get(spec.kind)
    if factory is None:
        raise AdapterError(f"source {spec.name!r}: unknown kind {spec.kind!r}")
    return factory(spec)


def close_source(source: DeltaSource) -> None:
    """Release a source's connections, when its kind holds any."""
    if isinstance(source, _Closable):
        source.close()
