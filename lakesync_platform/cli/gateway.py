"""``lakesync gateway``: serve the LakeSync protocol v1 gateway.

The flags (or their environment variables) become one :class:`GatewaySettings`, handed to the
gateway's server, which builds the app with ``create_app(settings)`` in each worker process.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click

from ..settings import (
    DEFAULT_ACTION_LEASE_S,
    DEFAULT_ACTION_RETENTION_S,
    DEFAULT_ACTION_TIMEOUT_S,
    ENV_ACTION_LEASE_SECONDS,
    ENV_ACTION_RETENTION_SECONDS,
    ENV_ACTION_TIMEOUT_SECONDS,
    ENV_CHECKPOINTS,
    ENV_DATA_DIR,
    ENV_DRAIN_SECONDS,
    ENV_JWT_SECRET,
    ENV_JWT_SECRET_PREVIOUS,
    ENV_MAX_BACKLOG_BYTES,
    ENV_WAL_URL,
    ENV_WAREHOUSE,
    DataLayout,
    GatewaySettings,
    ObjectStoreSettings,
    checkpoint_root,
)
from .options import data_dir_option, defs_dir_option, resolve_secret

__all__ = ["gateway", "gateway_settings"]


def gateway_settings(
    data_dir: Path,
    *,
    wal_url: str | None,
    jwt_secret: str | None,
    jwt_secret_previous: str | None,
    no_auth: bool,
    max_backlog_bytes: int | None,
    rate_limit: int | None,
    cors_origins: tuple[str, ...],
    defs_dir: Path | None = None,
    action_timeout_s: float = DEFAULT_ACTION_TIMEOUT_S,
    action_lease_s: float = DEFAULT_ACTION_LEASE_S,
    action_retention_s: float = DEFAULT_ACTION_RETENTION_S,
    ws_max_connections: int | None = None,
    ws_rate_limit: int | None = None,
    ws_send_queue: int | None = None,
    ws_poll_interval_s: float | None = None,
    checkpoints: str | None = None,
    drain_s: float = 0.0,
) -> GatewaySettings:
    """The gateway's settings from its flags (the secret file is created on first start);
    ``${VAR}`` in the declarations is read from this process's environment; ``ws_*`` flags
    left unset keep the settings' defaults. Checkpoints are read from ``checkpoints``, else
    where the pipeline writes them by default (beside an S3 ``LAKESYNC_WAREHOUSE``, or
    ``<data-dir>/checkpoints``), with the standard ``AWS_*`` variables for S3."""
    secrets: list[str] = []
    if not no_auth:
        secrets.append(resolve_secret(data_dir, jwt_secret, create=True))
        if jwt_secret_previous:
            secrets.append(jwt_secret_previous)
    settings = GatewaySettings(
        wal_url=wal_url or DataLayout.at(data_dir).wal_url,
        jwt_secrets=tuple(secrets),
        auth_enabled=not no_auth,
        max_backlog_bytes=max_backlog_bytes,
        rate_limit=rate_limit,
        allowed_origins=cors_origins or None,
        defs_dir=defs_dir,
        env={**os.environ, ENV_DATA_DIR: str(data_dir)},
        action_timeout_s=action_timeout_s,
        action_lease_s=action_lease_s,
        action_retention_s=action_retention_s,
        checkpoints=checkpoint_root(data_dir, os.environ.get(ENV_WAREHOUSE), checkpoints),
        object_store=ObjectStoreSettings.from_env(os.environ),
        drain_s=drain_s,
    )
    return dataclasses.replace(
        settings,
        ws_max_connections=ws_max_connections or settings.ws_max_connections,
        ws_max_messages_per_s=ws_rate_limit or settings.ws_max_messages_per_s,
        ws_send_queue=ws_send_queue or settings.ws_send_queue,
        ws_poll_interval_s=ws_poll_interval_s or settings.ws_poll_interval_s,
    )


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@data_dir_option
@defs_dir_option
@click.option("--wal-url", envvar=ENV_WAL_URL, help="sqlite:///PATH or postgresql://…")
@click.option("--jwt-secret", envvar=ENV_JWT_SECRET, help="HS256 secret for tokens.")
@click.option(
    "--jwt-secret-previous",
    envvar=ENV_JWT_SECRET_PREVIOUS,
    help="Previous secret, still accepted during rotation.",
)
@click.option("--no-auth", is_flag=True, help="Disable authentication (local development only).")
@click.option(
    "--max-backlog-bytes",
    type=int,
    envvar=ENV_MAX_BACKLOG_BYTES,
    help="Answer pushes with 503 while the unflushed WAL backlog is over this size.",
)
@click.option("--rate-limit", type=int, help="Requests per minute per caller (off by default).")
@click.option(
    "--cors-origin", multiple=True, help="Allowed CORS origin (repeat); default reflects any."
)
@click.option(
    "--ws-max-connections",
    type=click.IntRange(min=1),
    help="WebSocket sessions per process (default 1000).",
)
@click.option(
    "--ws-rate-limit",
    type=click.IntRange(min=1),
    help="WebSocket messages per second per socket (default 50).",
)
@click.option(
    "--ws-send-queue",
    type=click.IntRange(min=1),
    help="Replies and broadcast pages queued for a socket before it is closed as too far"
    " behind (default 64).",
)
@click.option(
    "--ws-poll-interval",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds between reads of the WAL's head that notice other processes' commits for"
    " broadcast (default 0.025).",
)
@click.option(
    "--checkpoints",
    envvar=ENV_CHECKPOINTS,
    help="Where the pipeline writes initial-sync checkpoints: a folder or s3://bucket/prefix"
    " (default: beside an S3 LAKESYNC_WAREHOUSE, else <data-dir>/checkpoints).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Worker processes sharing the listening socket.",
)
@click.option("--log-level", default="info", show_default=True)
@click.option(
    "--drain-seconds",
    type=click.FloatRange(min=0),
    envvar=ENV_DRAIN_SECONDS,
    default=0.0,
    show_default=True,
    help="On SIGTERM, fail /ready and keep serving this long before closing WebSockets (1001)"
    " and stopping; behind a balancer at least its check interval x fall count.",
)
@click.option(
    "--action-timeout",
    type=click.FloatRange(min=0, min_open=True),
    envvar=ENV_ACTION_TIMEOUT_SECONDS,
    default=DEFAULT_ACTION_TIMEOUT_S,
    show_default=True,
    help="Seconds an action request waits for its handler.",
)
@click.option(
    "--action-lease",
    type=click.FloatRange(min=0, min_open=True),
    envvar=ENV_ACTION_LEASE_SECONDS,
    default=DEFAULT_ACTION_LEASE_S,
    show_default=True,
    help="Seconds before a retry may take over an unfinished action (its process crashed).",
)
@click.option(
    "--action-retention",
    type=click.FloatRange(min=0, min_open=True),
    envvar=ENV_ACTION_RETENTION_SECONDS,
    default=DEFAULT_ACTION_RETENTION_S,
    show_default=True,
    help="Seconds action results are kept for retries.",
)
def gateway(
    host: str,
    port: int,
    data_dir: Path,
    defs_dir: Path,
    wal_url: str | None,
    jwt_secret: str | None,
    jwt_secret_previous: str | None,
    no_auth: bool,
    max_backlog_bytes: int | None,
    rate_limit: int | None,
    cors_origin: tuple[str, ...],
    ws_max_connections: int | None,
    ws_rate_limit: int | None,
    ws_send_queue: int | None,
    ws_poll_interval: float | None,
    checkpoints: str | None,
    workers: int,
    log_level: str,
    drain_seconds: float,
    action_timeout: float,
    action_lease: float,
    action_retention: float,
) -> None:
    """Serve the LakeSync protocol v1 gateway."""
    # The gateway app is an application on top of this package; only this edge loads it.
    from gateway.serve import serve

    data_dir.mkdir(parents=True, exist_ok=True)
    settings = gateway_settings(
        data_dir,
        wal_url=wal_url,
        jwt_secret=jwt_secret,
        jwt_secret_previous=jwt_secret_previous,
        no_auth=no_auth,
        max_backlog_bytes=max_backlog_bytes,
        rate_limit=rate_limit,
        cors_origins=cors_origin,
        defs_dir=defs_dir.resolve(),
        action_timeout_s=action_timeout,
        action_lease_s=action_lease,
        action_retention_s=action_retention,
        ws_max_connections=ws_max_connections,
        ws_rate_limit=ws_rate_limit,
        ws_send_queue=ws_send_queue,
        ws_poll_interval_s=ws_poll_interval,
        checkpoints=checkpoints,
        drain_s=drain_seconds,
    )
    click.echo(f"LakeSync gateway on http://{host}:{port}  (WAL: {settings.wal_url})", err=True)
    if no_auth:
        click.echo(
            "WARNING: authentication is OFF (--no-auth); for local development only.", err=True
        )
    else:
        click.echo(f"Mint a token: lakesync token --data-dir {data_dir} --sub ID --gw GW", err=True)
    serve(settings, host=host, port=port, workers=workers, log_level=log_level)
