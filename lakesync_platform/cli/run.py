"""Pipeline commands of the ``lakesync`` CLI: ``setup``, ``dev`` and ``run``.

:func:`register` adds them to the main click group (``lakesync_platform.cli``). Settings are
read here, at the process edge (flags, then the environment variables of ``settings``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

import click

from ..core.errors import LakeSyncError
from ..settings import ENV_WAL_URL
from .checks import NotReady, embedded_wal_file, require_data_dir, require_free_ports
from .options import data_dir_option, defs_dir_option

__all__ = ["register"]


@click.command()
@data_dir_option
def setup(data_dir: Path) -> None:
    """Prepare Spark + Iceberg offline: check Java, fill <data-dir>/jars (idempotent)."""
    from ..install.jars import ensure_jars
    from ..install.jdk import find_java
    from ..settings import DataLayout

    try:
        started = time.monotonic()
        java = find_java(os.environ)
        click.echo(f"java      {java.java}")
        jars = ensure_jars(DataLayout.at(data_dir).jar_dir, os.environ)
        for jar in jars.all:
            click.echo(f"jar       {jar}")
        if jars.local_fs is None:
            click.echo(
                "note      no javac: the lake writes through Hadoop's default local filesystem "
                "(a chmod process per file; install a JDK for the fork-free one)"
            )
        click.echo(f"ready in {time.monotonic() - started:.1f}s")
    except LakeSyncError as exc:
        raise click.ClickException(exc.message) from exc


@click.command()
@data_dir_option
@defs_dir_option
@click.option("--gateway-port", default=8000, show_default=True, type=int)
@click.option("--dagster-port", default=3000, show_default=True, type=int)
@click.option("--clients", default=3, show_default=True, type=int, help="Demo clients (0: none).")
def dev(data_dir: Path, defs_dir: Path, gateway_port: int, dagster_port: int, clients: int) -> None:
    """Start the gateway, the Dagster UI and demo clients together; Ctrl-C stops everything."""
    from ..install.jars import ensure_jars
    from ..install.jdk import find_java
    from ..settings import DataLayout
    from .dev import DevStack, DevStackSettings

    require_free_ports([("--gateway-port", gateway_port), ("--dagster-port", dagster_port)])
    workspace = Path(__file__).resolve().parents[2] / "workspace.yaml"
    if not workspace.exists():
        raise click.ClickException(f"workspace.yaml not found next to the package ({workspace})")
    try:
        find_java(os.environ)
        ensure_jars(DataLayout.at(data_dir).jar_dir, os.environ)
    except LakeSyncError as exc:
        raise click.ClickException(exc.message) from exc
    stack = DevStack(
        DevStackSettings(
            data_dir=data_dir.resolve(),
            defs_dir=defs_dir.resolve(),
            workspace=workspace,
            gateway_port=gateway_port,
            dagster_port=dagster_port,
            demo_clients=clients,
        ),
        os.environ,
    )
    code = 1

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        stack.start(click.echo)
        click.echo("running — open the Dagster UI; Ctrl-C stops everything")
        code = stack.wait()
    except KeyboardInterrupt:
        code = 0
    except (RuntimeError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
    finally:
        click.echo("stopping …")
        stack.stop()
    sys.exit(code)


@click.command()
@click.argument("stage", type=click.Choice(["flush", "state", "materialise"]))
@click.option("--gw", help="Gateway id (default: every known gateway).")
@data_dir_option
@defs_dir_option
@click.option("--wal-url", envvar=ENV_WAL_URL, help="sqlite:///PATH or postgresql://…")
def run(stage: str, gw: str | None, data_dir: Path, defs_dir: Path, wal_url: str | None) -> None:
    """Run one pipeline stage once, in-process (exit status 1 on failure; 2 for a missing data
    directory or WAL, or an unknown gateway, before anything is created)."""
    from ..pipeline.context import PipelineContext
    from ..pipeline.flush import run_flush
    from ..pipeline.materialise import run_materialise
    from ..pipeline.state import run_state
    from ..settings import PipelineSettings

    logging.basicConfig(level=logging.WARNING)
    settings = PipelineSettings.from_env(
        os.environ, data_dir=str(data_dir), wal_url=wal_url, defs_dir=str(defs_dir)
    )
    ctx = PipelineContext(settings)
    try:
        declared = set(ctx.declarations.gateways)  # a bad declaration fails first (status 1)
        require_data_dir(settings.data_dir)
        wal_file = embedded_wal_file(settings.resolved_wal_url)
        if wal_file is not None and not wal_file.exists():
            raise NotReady(
                f"no WAL at {wal_file}: start the gateway on it first "
                f"(lakesync gateway --data-dir {settings.data_dir}) and push some changes"
            )
        known = sorted(declared | set(ctx.wal.gateway_ids()))
        if gw is not None and gw not in known:
            raise NotReady(
                f"unknown gateway {gw!r}: not declared in {settings.resolved_defs_dir} "
                f"and unknown to the WAL (known: {', '.join(known) or 'none'})"
            )
        ctx.apply_declarations()
        for g in [gw] if gw else known:
            if stage == "flush":
                click.echo(repr(run_flush(ctx, g)))
            elif stage == "state":
                for state_result in run_state(ctx, g):
                    click.echo(repr(state_result))
            else:
                mat = run_materialise(ctx, g)
                for _, mat_result in mat.results:
                    click.echo(repr(mat_result))
                for failure in mat.failures:
                    click.echo(f"best-effort destination failed: {failure}", err=True)
    except LakeSyncError as exc:
        raise click.ClickException(f"{stage} failed: {exc.message}") from exc
    finally:
        ctx.close()


def register(group: click.Group) -> None:
    """Add ``setup``, ``dev`` and ``run`` to the ``lakesync`` command group."""
    group.add_command(setup)
    group.add_command(dev)
    group.add_command(run)
