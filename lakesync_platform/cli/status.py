"""``lakesync status``: WAL counters per gateway id, then the lake's tables and each
gateway's last checkpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.errors import LakeSyncError
from ..settings import (
    ENV_CHECKPOINTS,
    ENV_WAL_URL,
    ENV_WAREHOUSE,
    DataLayout,
    ObjectStoreSettings,
    checkpoint_root,
)
from .checks import NotReady, embedded_wal_file, require_data_dir
from .options import data_dir_option

if TYPE_CHECKING:
    from ..wal.store import WriteAheadLog

__all__ = ["status"]


@click.command()
@data_dir_option
@click.option("--wal-url", envvar=ENV_WAL_URL)
@click.option("--gw", help="Only this gateway id.")
def status(data_dir: Path, wal_url: str | None, gw: str | None) -> None:
    """Show WAL counters per gateway id (reads only: creates nothing)."""
    from ..wal.store import WriteAheadLog

    if wal_url is None:
        require_data_dir(data_dir)
    url = wal_url or DataLayout.at(data_dir).wal_url
    wal_file = embedded_wal_file(url)
    if wal_file is not None and not wal_file.parent.is_dir():
        raise NotReady(f"no directory {wal_file.parent} for the WAL {wal_file}")
    if wal_file is not None and not wal_file.exists():
        click.echo("no gateways yet")
        return
    try:
        wal = WriteAheadLog.open(url, now_ms=int(time.time() * 1000))
    except LakeSyncError as exc:
        raise click.ClickException(exc.message) from exc
    try:
        known = wal.gateway_ids()
        if gw is not None and gw not in known:
            raise NotReady(f"unknown gateway {gw!r} (known: {', '.join(known) or 'none'})")
        ids = [gw] if gw else known
        if not ids:
            click.echo("no gateways yet")
        for gid in ids:
            s = wal.stats(gid)
            click.echo(
                f"{gid}: cursor={s.max_cursor} flushed_to={s.flush_watermark} "
                f"backlog={s.backlog_entries} entries/{s.backlog_bytes} bytes "
                f"rows={s.row_count} live={s.live_rows}"
            )
        if ids:
            _hot_wal(wal, ids)
        if ids:  # the lake's tables (files, snapshots, last compaction): cli/lake.py
            from .lake import lake_status_lines

            for line in lake_status_lines(data_dir, ids, os.environ, int(time.time() * 1000)):
                click.echo(line)
            _checkpoints(data_dir, ids, int(time.time() * 1000))
    finally:
        wal.close()


def _hot_wal(wal: WriteAheadLog, ids: list[str]) -> None:
    """The hot WAL's section: its size on disk, and per gateway its floor (entries at or
    below it were trimmed: the lake holds them) and the entries it still holds."""
    from ..pipeline.report import number

    used = wal.storage()
    free = "" if used.free_bytes is None else f" ({number(used.free_bytes)} bytes free)"
    click.echo(f"hot WAL: {number(used.bytes)} bytes on disk{free}")
    for gid in ids:
        s = wal.stats(gid)
        click.echo(f"  {gid}: floor={s.log_floor} entries={s.log_entries}")


def _age(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _checkpoints(data_dir: Path, gateways: Sequence[str], now_ms: int) -> None:
    """The checkpoint section: each gateway's current checkpoint, its cursor and age (where
    the pipeline writes them: ``LAKESYNC_CHECKPOINTS``, beside an S3 ``LAKESYNC_WAREHOUSE``, or
    ``<data-dir>/checkpoints``)."""
    from ..adapters.checkpoints import open_checkpoint_store
    from ..core.checkpoint import CURRENT_MANIFEST, decode_manifest

    root = checkpoint_root(data_dir, os.environ.get(ENV_WAREHOUSE), os.environ.get(ENV_CHECKPOINTS))
    s3 = ObjectStoreSettings.from_env(os.environ)
    click.echo(f"checkpoints ({root}):")
    try:
        store = open_checkpoint_store(
            root,
            endpoint=s3.endpoint,
            region=s3.region,
            access_key_id=s3.access_key_id,
            secret_access_key=s3.secret_access_key,
            session_token=s3.session_token,
        )
        for gid in gateways:
            data = store.read(gid, CURRENT_MANIFEST)
            if data is None:
                click.echo(f"  {gid}: none yet")
                continue
            m = decode_manifest(data)
            age = now_ms - int(datetime.fromisoformat(m.generated_at).timestamp() * 1000)
            click.echo(
                f"  {gid}: cursor={m.cursor} age={_age(age)} rows={m.total_deltas} "
                f"chunks={m.chunk_count} bytes={m.total_bytes}"
            )
    except (LakeSyncError, ValueError) as exc:
        message = exc.message if isinstance(exc, LakeSyncError) else str(exc)
        click.echo(f"  unreadable: {message}")
