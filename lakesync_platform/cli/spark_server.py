"""``lakesync spark-server``: the Spark Connect server pipeline processes connect to.

It runs in the foreground (a service manager's or a container's main process) until SIGTERM
or Ctrl-C, which it passes on to the server's JVM. ``lakesync dev`` starts the same server
itself (:mod:`lakesync_platform.pipeline.spark_server`).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import click

from ..core.errors import LakeSyncError
from ..settings import ENV_SPARK_CONNECT_PORT, PipelineSettings
from .options import data_dir_option

__all__ = ["spark_server"]


@click.command("spark-server")
@data_dir_option
@click.option(
    "--port",
    type=int,
    envvar=ENV_SPARK_CONNECT_PORT,
    default=15002,
    show_default=True,
    help="The Spark Connect (gRPC) port; it is bound on every interface.",
)
def spark_server(data_dir: Path, port: int) -> None:
    """Run a Spark Connect server with the lake's catalog, jars and settings (the same
    LAKESYNC_* settings as `lakesync run`) until SIGTERM or Ctrl-C.

    Pipeline processes use it with LAKESYNC_SPARK_REMOTE=sc://HOST:PORT; those on this machine
    with the same data directory find it without the setting.
    """
    from ..pipeline.spark_server import start_spark_server, wait_for_server

    try:
        settings = PipelineSettings.from_env(os.environ, data_dir=str(data_dir))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        proc, log_file = start_spark_server(settings, port, os.environ, new_session=False)
    except LakeSyncError as exc:
        raise click.ClickException(exc.message) from exc

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    url = f"sc://127.0.0.1:{port}"
    try:
        waited = wait_for_server(url, proc, timeout_s=180)
    except LakeSyncError as exc:
        proc.terminate()
        raise click.ClickException(exc.message) from exc
    click.echo(f"spark     {url} ready in {waited:.1f}s (log {log_file})")
    sys.exit(proc.wait())
