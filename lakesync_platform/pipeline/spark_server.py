"""The pipeline's Spark Connect server, started from pipeline settings.

The server itself is :mod:`lakesync_platform.spark.server`; this is how the command line
(``lakesync spark-server``, ``lakesync dev``) starts it for a data directory's settings: the
same :func:`~lakesync_platform.pipeline.context.spark_settings` an in-process driver gets.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from ..settings import PipelineSettings
from ..spark.server import start_server, wait_for_server
from .context import spark_settings

__all__ = ["start_spark_server", "wait_for_server"]


def start_spark_server(
    settings: PipelineSettings,
    port: int,
    env: Mapping[str, str],
    *,
    log_path: Path | None = None,
    new_session: bool = True,
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the Spark Connect server of ``settings``' lake on ``port``; its process and the
    driver's log file."""
    spark = spark_settings(settings)
    proc = start_server(spark, port, env, log_path=log_path, new_session=new_session)
    return proc, spark.resolved_log_file
