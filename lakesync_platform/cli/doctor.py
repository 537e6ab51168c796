"""``lakesync doctor``: what is wrong with this machine or data directory, and what fixes it."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import click

from ..settings import ENV_WAL_URL, PipelineSettings
from .checks import diagnose
from .options import data_dir_option, defs_dir_option

__all__ = ["doctor"]


@click.command()
@data_dir_option
@defs_dir_option
@click.option("--wal-url", envvar=ENV_WAL_URL, help="sqlite:///PATH or postgresql://…")
@click.option("--gateway-port", default=8000, show_default=True, type=int)
@click.option("--dagster-port", default=3000, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of lines.")
def doctor(
    data_dir: Path,
    defs_dir: Path,
    wal_url: str | None,
    gateway_port: int,
    dagster_port: int,
    as_json: bool,
) -> None:
    """Check Java, the jars, the WAL, the Iceberg catalog, the declared destinations and the
    ports of lakesync dev; print what is wrong and the command that fixes it (reads only; exit
    status 0 when all is well, 1 otherwise)."""
    settings = PipelineSettings.from_env(
        os.environ, data_dir=str(data_dir), wal_url=wal_url, defs_dir=str(defs_dir)
    )
    ports = [("--gateway-port", gateway_port), ("--dagster-port", dagster_port)]
    findings = diagnose(settings, ports, os.environ)
    healthy = all(f.ok for f in findings)
    if as_json:
        document = {"ok": healthy, "checks": [dataclasses.asdict(f) for f in findings]}
        click.echo(json.dumps(document, indent=2))
    else:
        for f in findings:
            click.echo(f"{'ok  ' if f.ok else 'FAIL'}  {f.check:<24} {f.detail}")
            if f.fix:
                click.echo(f"{'':<30} fix: {f.fix}")
        problems = sum(not f.ok for f in findings)
        click.echo("all good" if healthy else f"{problems} problem(s)")
    sys.exit(0 if healthy else 1)
