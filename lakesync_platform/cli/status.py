"""``lakesync status``: WAL counters per gateway id."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.errors import LakeSyncError
from ..settings import ENV_WAL_URL, DataLayout
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
