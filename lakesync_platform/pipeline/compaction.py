"""Compaction when due: the sync job keeps every lake table within a bounded number of files.

Each flush adds a data file to the change log (one per partition it touches) and each state run
a data file and a position-delete file to the state table; left for the daily upkeep, a busy
gateway's tables gather a thousand files a day, and every read — the next ``MERGE``, a query,
a checkpoint — opens them all. So after each state run, :func:`compact_due` looks at each of the
gateway's tables (its snapshot summaries, read by pyiceberg: no Spark job) and, once the commits
since the table's last rewrite added ``compact_every_files`` data and delete files
(``LAKESYNC_COMPACT_EVERY_FILES``, default 16), rewrites its small files and merges its delete
files (:func:`lakesync_platform.spark.upkeep.compact_small_files`). Large files stay as they
are, so a compaction costs what was added since the last one, not the table. The change log's
lake watermark is committed again afterwards, as the daily upkeep does
(:mod:`lakesync_platform.pipeline.upkeep`), which still expires snapshots and removes orphans.

Why inside the sync job and not a job of its own: a compaction of a few small files takes about
a second on the run's warm Spark session, less than a Dagster run's own launch, and the sync job
already holds what it needs; a separate frequent job would launch as often for nothing and
wait for the lake's lock behind sync runs (docs/pipeline.md, *Compaction in the sync job*).
"""

from __future__ import annotations

from ..core.errors import FlushError
from ..core.schema import TableSchema
from ..spark.flush import lake_watermark
from ..spark.history import history_from_pyiceberg
from ..spark.layout import DELTAS_TABLE, WAL_TO_PROP, deltas_table, log_table, state_table
from ..spark.snapshots import load_table
from ..spark.upkeep import CompactionResult, compact_small_files, files_since_rewrite
from .context import PipelineContext

__all__ = ["compact_due", "files_since_rewrite_of"]


def files_since_rewrite_of(ctx: PipelineContext, qualified: str) -> int | None:
    """How many files were added to ``qualified`` since its last rewrite (``None``: no such
    table yet)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = load_table(ctx.lake_catalog, qualified)
    except NoSuchTableError:
        return None
    return files_since_rewrite(history_from_pyiceberg(table))


def compact_due(
    ctx: PipelineContext, gw: str, schemas: list[TableSchema] | None = None
) -> list[CompactionResult]:
    """Compact ``gw``'s change log and the state tables of ``schemas`` (default: every table of
    the gateway) where the files added since their last rewrite reached the threshold; each
    under the lake's lock, looked at again once inside it."""
    every = ctx.settings.upkeep.compact_every_files
    if every <= 0:
        return []
    tables = list(ctx.tables(gw).values()) if schemas is None else schemas
    candidates = [(DELTAS_TABLE, deltas_table(gw), False)]
    names = sorted({log_table(s) for s in tables})
    candidates += [(name, state_table(gw, name), True) for name in names]
    done: list[CompactionResult] = []
    for name, qualified, is_state in candidates:
        added = files_since_rewrite_of(ctx, qualified)
        if added is None or added < every:
            continue
        spark = ctx.spark  # started before the lock is taken: the lock is for the lake's work
        with ctx.exclusive("compaction", gw):
            added = files_since_rewrite_of(ctx, qualified)
            if added is None or added < every:
                continue
            mark = None if is_state else lake_watermark(spark, gw, ctx.lake_catalog).cursor
            done.append(
                compact_small_files(
                    spark,
                    ctx.lake_catalog,
                    gw,
                    name,
                    qualified,
                    ctx.settings.upkeep.compact_small_file_bytes,
                    sort_by_row_id=is_state,
                    properties={} if mark is None else {WAL_TO_PROP: str(mark)},
                )
            )
            if mark is not None:
                after = lake_watermark(spark, gw, ctx.lake_catalog).cursor
                if after != mark:
                    raise FlushError(
                        f"compaction of {gw!r} moved the lake watermark from {mark} to {after}"
                    )
    return done
