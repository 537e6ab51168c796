"""``lakesync status``: WAL counters per gateway id."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..settings import ENV_WAL_URL, DataLayout
from .options import data_dir_option

__all__ = ["status"]


@click.command()
@data_dir_option
@click.option("--wal-url", envvar=ENV_WAL_URL)
@click.option("--gw", help="Only this gateway id.")
def status(data_dir: Path, wal_url: str | None, gw: str | None) -> None:
    """Show WAL counters per gateway id."""
    from ..wal.store import WriteAheadLog

    wal = WriteAheadLog.open(
        wal_url or DataLayout.at(data_dir).wal_url, now_ms=int(time.time() * 1000)
    )
    try:
        ids = [gw] if gw else wal.gateway_ids()
        if not ids:
            click.echo("no gateways yet")
        for gid in ids:
            s = wal.stats(gid)
            click.echo(
                f"{gid}: cursor={s.max_cursor} flushed_to={s.flush_watermark} "
                f"backlog={s.backlog_entries} entries/{s.backlog_bytes} bytes "
                f"rows={s.row_count} live={s.live_rows}"
            )
    finally:
        wal.close()
