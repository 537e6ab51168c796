"""Pipeline commands of the ``lakesync`` CLI: ``setup``, ``dev`` and ``run``.

:func:`register` adds them to the main click group (``lakesync_platform.cli``). Settings are
read here, at the process edge (flags, then the environment variables of ``settings``).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.errors import LakeSyncError
from ..pipeline.report import StageResult, describe, json_document
from ..settings import ENV_SPARK_PACKAGES, ENV_WAL_URL
from .checks import NotReady, embedded_wal_file, require_data_dir, require_free_ports
from .options import data_dir_option, defs_dir_option
from .progress import Progress, libraries_logged_to, warnings_to_stderr

if TYPE_CHECKING:
    from ..pipeline.context import PipelineContext

__all__ = ["register"]


@contextmanager
def _step(name: str, start: str | None = None) -> Iterator[Callable[[str], None]]:
    """One step of ``lakesync setup``: an optional start line (long steps), then a line with
    what the step ``done(…)`` reported and its elapsed time."""
    started = time.monotonic()
    if start is not None:
        click.echo(f"{name:<9} {start} …")
    outcome: list[str] = []
    yield outcome.append
    click.echo(f"{name:<9} {' '.join(outcome)} ({time.monotonic() - started:.1f}s)")


@click.command()
@data_dir_option
def setup(data_dir: Path) -> None:
    """Prepare Spark + Iceberg: check Java, fetch the pinned jars into <data-dir>/jars with
    mvn (skipped when they are all there), compile the lake's local filesystem jar."""
    from ..install.jars import POM, ensure_maven_jars, maven_command, missing_jars
    from ..install.jdk import find_java
    from ..install.local_fs import ensure_local_fs_jar
    from ..settings import PipelineSettings

    settings = PipelineSettings.from_env(os.environ, data_dir=str(data_dir))
    jar_dir = settings.resolved_jar_dir
    try:
        started = time.monotonic()
        with _step("java") as done:
            done(str(find_java(os.environ).java))
        missing = missing_jars(jar_dir)
        fetch = f"{len(missing)} pinned jars: {shlex.join(maven_command(jar_dir))}"
        with _step("jars", fetch if missing else None) as done:
            jars, fetched = ensure_maven_jars(jar_dir, os.environ)
            done(f"{len(jars)} {'fetched' if fetched else 'up to date'} in {jar_dir} ({POM.name})")
        with _step("local fs") as done:
            local_fs = ensure_local_fs_jar(jar_dir, os.environ)
            done(
                local_fs.name
                if local_fs is not None
                else "no javac: the lake writes through Hadoop's default local filesystem "
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
@click.option(
    "--spark-port",
    default=15002,
    show_default=True,
    type=int,
    help="Port of the Spark Connect server the runs share (0: none; each run starts a JVM).",
)
def dev(
    data_dir: Path,
    defs_dir: Path,
    gateway_port: int,
    dagster_port: int,
    clients: int,
    spark_port: int,
) -> None:
    """Start the gateway, the Spark Connect server, the Dagster UI and demo clients together;
    Ctrl-C stops everything.

    The jars are checked (and fetched when missing) where the runs will load them:
    LAKESYNC_JAR_DIR, else <data-dir>/jars; with LAKESYNC_SPARK_PACKAGES Spark fetches them.
    """
    from ..install.jars import ensure_jars
    from ..install.jdk import find_java
    from ..settings import PipelineSettings
    from .dev import DevStack, DevStackSettings

    ports = [("--gateway-port", gateway_port), ("--dagster-port", dagster_port)]
    require_free_ports(ports + ([("--spark-port", spark_port)] if spark_port else []))
    workspace = Path(__file__).resolve().parents[2] / "workspace.yaml"
    if not workspace.exists():
        raise click.ClickException(f"workspace.yaml not found next to the package ({workspace})")
    try:
        settings = PipelineSettings.from_env(os.environ, data_dir=str(data_dir))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        find_java(os.environ)
        if settings.spark_packages:
            click.echo(f"jars      Maven coordinates ({ENV_SPARK_PACKAGES}), fetched by Spark")
        else:
            jars = ensure_jars(settings.resolved_jar_dir, os.environ)
            click.echo(f"jars      {len(jars.all)} in {jars.folder}")
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
            jar_dir=settings.jar_dir,
            spark_port=spark_port,
        ),
        os.environ,
    )
    code = 1

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    # Both stop the stack the same way; SIGINT explicitly too, as a shell starts a background
    # job with SIGINT ignored (`lakesync dev &` then `kill -INT %1`).
    handlers = signal.signal(signal.SIGTERM, interrupt), signal.signal(signal.SIGINT, interrupt)
    try:
        stack.start(click.echo)
        click.echo("running — open the Dagster UI; Ctrl-C stops everything")
        code = stack.wait()
    except KeyboardInterrupt:
        code = 0
    except (RuntimeError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
    finally:
        # A second Ctrl-C must not cut the bounded stop short and leave children behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        click.echo("stopping …")
        stack.stop(click.echo)
        click.echo("stopped")
        signal.signal(signal.SIGTERM, handlers[0])  # as they were (a caller in this process)
        signal.signal(signal.SIGINT, handlers[1])
    sys.exit(code)


@click.command()
@click.argument(
    "stage",
    type=click.Choice(
        [
            "flush",
            "state",
            "materialise",
            "connector",
            "trim",
            "lifecycle",
            "compact",
            "checkpoint",
            "sync",
        ]
    ),
)
@click.argument("name", required=False)
@click.option("--gw", help="Gateway id (default: every known gateway).")
@data_dir_option
@defs_dir_option
@click.option("--wal-url", envvar=ENV_WAL_URL, help="sqlite:///PATH or postgresql://…")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON document on stdout, no progress on stderr."
)
def run(
    stage: str,
    name: str | None,
    gw: str | None,
    data_dir: Path,
    defs_dir: Path,
    wal_url: str | None,
    as_json: bool,
) -> None:
    """Run one pipeline stage once, in-process (exit status 1 on failure; 2 for a missing data
    directory or WAL, or an unknown gateway, before anything is created).

    Prints one line per gateway or table (entries, rows, range, time) and progress on stderr;
    the JVM's log goes to <data-dir>/logs/spark.log. A stage another process is running on the
    same lake is waited for (LAKESYNC_LOCK_TIMEOUT_SECONDS, default 900).

    ``lakesync run connector NAME [--gw GW]`` polls one registered connector once (``--gw``
    may be left out when only one gateway has a connector of that name).

    ``lakesync run compact [--gw GW]`` looks after the lake: compaction, then snapshot expiry
    and orphan removal, table by table (LAKESYNC_SNAPSHOT_RETENTION_SECONDS and the other
    upkeep settings).
    ``trim`` trims the hot WAL of what the lake holds (LAKESYNC_WAL_RETENTION_SECONDS,
    LAKESYNC_WAL_RETENTION_ENTRIES, LAKESYNC_DEDUP_RETENTION_SECONDS); ``lifecycle`` trims and
    then moves old rows of destinations with a lifecycle block to their cold tier.
    ``checkpoint`` writes an initial-sync checkpoint of the lake's state (when it moved since
    the last one) and removes superseded ones.
    ``lakesync run sync`` runs the sync job — flush, state, materialise — on one Spark session.
    """
    from ..pipeline.context import PipelineContext
    from ..settings import PipelineSettings

    warnings_to_stderr()
    try:
        settings = PipelineSettings.from_env(
            os.environ, data_dir=str(data_dir), wal_url=wal_url, defs_dir=str(defs_dir)
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    ctx = PipelineContext(settings)
    progress = Progress(quiet=as_json)
    started = time.monotonic()
    results: list[StageResult] = []
    stack = ExitStack()
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
        stack.enter_context(libraries_logged_to(settings.layout.run_log))
        if stage == "connector":
            results.append(_run_connector(ctx, name, gw, progress))
            gateways = []
        else:
            gateways = [gw] if gw else known
        if gateways and stage != "checkpoint":  # a checkpoint with nothing new needs no Spark
            with progress.step(f"starting Spark (JVM log: {settings.layout.spark_log})"):
                ctx.spark  # noqa: B018 — started here, so its time is shown apart from the stages
        for g in gateways:
            with progress.step(f"{stage} {g}"):
                done = _run_stage(ctx, stage, g, progress)
            results += done
            if not as_json:
                for result in done:
                    click.echo(describe(result))
    except LakeSyncError as exc:
        if as_json:
            click.echo(json_document(stage, results, time.monotonic() - started, exc))
        raise click.ClickException(f"{stage} failed: {exc.message}") from exc
    finally:
        stack.close()
        ctx.close()
    if as_json:
        click.echo(json_document(stage, results, time.monotonic() - started))


def _run_connector(
    ctx: PipelineContext, name: str | None, gw: str | None, progress: Progress
) -> StageResult:
    """Poll connector ``name`` once (of ``gw``, or of the one gateway that has it)."""
    from ..pipeline.connectors import registered_connectors, run_connector

    if not name:
        raise click.UsageError("run connector needs the connector's NAME")
    owners = [g for g, cfg in registered_connectors(ctx) if cfg.name == name]
    if gw is None and len(owners) != 1:
        raise NotReady(
            f"connector {name!r} is registered for {len(owners)} gateways "
            f"({', '.join(owners) or 'none'}): name one with --gw"
        )
    owner = gw or owners[0]
    with progress.step(f"connector {owner}/{name}"):
        report = run_connector(ctx, owner, name)
    if not progress.quiet:
        click.echo(describe(report))
    return report


def _run_stage(ctx: PipelineContext, stage: str, gw: str, progress: Progress) -> list[StageResult]:
    """Run ``stage`` of ``gw``; its results."""
    from ..pipeline.checkpoint import run_checkpoint
    from ..pipeline.flush import run_flush
    from ..pipeline.materialise import run_materialise
    from ..pipeline.state import run_state

    if stage == "sync":
        return [result for step in _SYNC_JOB for result in _run_stage(ctx, step, gw, progress)]
    if stage == "checkpoint":
        return [run_checkpoint(ctx, gw)]
    if stage == "compact":
        from ..pipeline.upkeep import run_compaction, run_expiry

        compacted = run_compaction(ctx, gw, step=progress.step)
        return [*compacted, *run_expiry(ctx, gw, step=progress.step)]
    if stage == "flush":
        return [run_flush(ctx, gw)]
    if stage in ("trim", "lifecycle"):
        from ..pipeline.lifecycle import run_trim
        from ..pipeline.tiering import run_tiering

        trimmed: list[StageResult] = [run_trim(ctx, gw)]
        return trimmed + list(run_tiering(ctx, gw)) if stage == "lifecycle" else trimmed
    if stage == "state":
        from ..pipeline.compaction import compact_due

        merged: list[StageResult] = list(run_state(ctx, gw))
        return merged + list(compact_due(ctx, gw))
    done = run_materialise(ctx, gw)
    for failure in done.failures:
        click.echo(
            f"best-effort destination {failure.destination} failed for {failure.table} "
            f"after {failure.attempts} tries: {failure.error}",
            err=True,
        )
    return [result for _, result in done.results]


_SYNC_JOB = ("flush", "state", "materialise")
"""The stages of the sync job (Dagster's ``sync_<gw>``), in order."""


def register(group: click.Group) -> None:
    """Add ``setup``, ``dev`` and ``run`` to the ``lakesync`` command group."""
    group.add_command(setup)
    group.add_command(dev)
    group.add_command(run)
