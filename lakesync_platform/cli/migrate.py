"""``lakesync migrate``: copy a destination's tables into another declared destination."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ..core.errors import LakeSyncError
from ..pipeline.migrate import BATCH_ROWS
from ..settings import ENV_WAL_URL
from .checks import NotReady
from .options import data_dir_option, defs_dir_option
from .progress import Progress

__all__ = ["migrate"]


@click.command()
@click.option("--from", "source", required=True, help="Declared destination to copy from.")
@click.option("--to", "target", required=True, help="Declared destination to copy into.")
@click.option(
    "--tables", multiple=True, help="Tables to copy (repeat or comma-separate; default: all)."
)
@click.option("--gw", help="Gateway id (default: the one gateway declaring --from).")
@data_dir_option
@defs_dir_option
@click.option("--wal-url", envvar=ENV_WAL_URL, help="sqlite:///PATH or postgresql://…")
@click.option(
    "--batch-rows",
    default=BATCH_ROWS,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows read and written at a time (one transaction on the target each).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report as JSON, no progress on stderr."
)
def migrate(
    source: str,
    target: str,
    tables: tuple[str, ...],
    gw: str | None,
    data_dir: Path,
    defs_dir: Path,
    wal_url: str | None,
    batch_rows: int,
    as_json: bool,
) -> None:
    """Copy a destination's rows into another one, in batches (upsert by row_id, watermark
    carried over once every row is in; safe to re-run). Progress on stderr, a line per table
    and the rows copied after each batch. Exit status 2 for an unknown destination, table or
    gateway."""
    from ..pipeline.context import PipelineContext
    from ..pipeline.migrate import MigrationError, migrate_destination
    from ..pipeline.report import number
    from ..settings import PipelineSettings

    settings = PipelineSettings.from_env(
        os.environ, data_dir=str(data_dir), wal_url=wal_url, defs_dir=str(defs_dir)
    )
    ctx = PipelineContext(settings)
    chosen = [t for item in tables for t in item.split(",") if t] or None
    try:
        gateways = ctx.declarations.gateways
        if gw is None:
            owners = [g for g, d in gateways.items() if source in d.destinations]
            if len(owners) != 1:
                raise NotReady(
                    f"destination {source!r} is declared by {len(owners)} gateways in "
                    f"{settings.resolved_defs_dir}: pass --gw"
                    if owners
                    else f"unknown destination {source!r}: not declared in "
                    f"{settings.resolved_defs_dir}"
                )
            gw = owners[0]
        elif gw not in gateways:
            raise NotReady(f"unknown gateway {gw!r}: not declared in {settings.resolved_defs_dir}")
        progress = Progress(quiet=as_json)
        report = migrate_destination(
            ctx,
            gw,
            source,
            target,
            chosen,
            batch_rows=batch_rows,
            step=progress.step,
            on_rows=lambda table, rows: progress.note(f"  {table}: {number(rows)} rows copied"),
        )
    except MigrationError as exc:
        raise NotReady(exc.message) from exc
    except LakeSyncError as exc:
        raise click.ClickException(f"migrate failed: {exc.message}") from exc
    finally:
        ctx.close()
    click.echo(json.dumps(report.to_json()) if as_json else report.summary())
