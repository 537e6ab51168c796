"""The ``lakesync`` command line: serve the gateway, mint tokens, show status.

Settings are read here, once (flags, then ``LAKESYNC_*`` environment variables, then defaults
under the data directory), and passed down explicitly.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
import time
from pathlib import Path
from typing import Any

import click

from .cli_options import data_dir_option
from .core.auth import sign_token
from .settings import DataLayout

__all__ = ["main"]


def resolve_secret(data_dir: Path, given: str | None, *, create: bool) -> str:
    """The JWT secret: the flag/env value, else ``<data-dir>/jwt_secret`` (created if asked)."""
    if given:
        return given
    path = data_dir / "jwt_secret"
    if path.exists():
        return path.read_text().strip()
    if not create:
        raise click.UsageError(
            f"No JWT secret: pass --jwt-secret, set LAKESYNC_JWT_SECRET, or start the gateway "
            f"once with --data-dir {data_dir} to create {path}"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path.read_text().strip()


@click.group()
@click.version_option(package_name="lakesync-platform")
def main() -> None:
    """LakeSync Platform: sync gateway, client SDK and lake pipeline."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@data_dir_option
@click.option("--wal-url", envvar="LAKESYNC_WAL_URL", help="sqlite:///PATH or postgresql://…")
@click.option("--jwt-secret", envvar="LAKESYNC_JWT_SECRET", help="HS256 secret for tokens.")
@click.option(
    "--jwt-secret-previous",
    envvar="LAKESYNC_JWT_SECRET_PREVIOUS",
    help="Previous secret, still accepted during rotation.",
)
@click.option("--no-auth", is_flag=True, help="Disable authentication (local development only).")
@click.option(
    "--max-backlog-bytes",
    type=int,
    envvar="LAKESYNC_MAX_BACKLOG_BYTES",
    help="Answer pushes with 503 while the unflushed WAL backlog is over this size.",
)
@click.option("--rate-limit", type=int, help="Requests per minute per caller (off by default).")
@click.option(
    "--cors-origin", multiple=True, help="Allowed CORS origin (repeat); default reflects any."
)
@click.option("--workers", default=1, show_default=True, type=int, help="uvicorn worker processes.")
@click.option("--log-level", default="info", show_default=True)
def gateway(
    host: str,
    port: int,
    data_dir: Path,
    wal_url: str | None,
    jwt_secret: str | None,
    jwt_secret_previous: str | None,
    no_auth: bool,
    max_backlog_bytes: int | None,
    rate_limit: int | None,
    cors_origin: tuple[str, ...],
    workers: int,
    log_level: str,
) -> None:
    """Serve the LakeSync protocol v1 gateway."""
    import uvicorn

    data_dir.mkdir(parents=True, exist_ok=True)
    secrets_: list[str] = []
    if not no_auth:
        secrets_.append(resolve_secret(data_dir, jwt_secret, create=True))
        if jwt_secret_previous:
            secrets_.append(jwt_secret_previous)
    config: dict[str, Any] = {
        "wal_url": wal_url or DataLayout.at(data_dir).wal_url,
        "jwt_secrets": secrets_,
        "auth_enabled": not no_auth,
        "max_backlog_bytes": max_backlog_bytes,
        "rate_limit": rate_limit,
        "allowed_origins": list(cors_origin) or None,
    }
    os.environ["LAKESYNC_GATEWAY_CONFIG"] = json.dumps(config)
    click.echo(f"LakeSync gateway on http://{host}:{port}  (WAL: {config['wal_url']})", err=True)
    if no_auth:
        click.echo(
            "WARNING: authentication is OFF (--no-auth); for local development only.", err=True
        )
    else:
        click.echo(f"Mint a token: lakesync token --data-dir {data_dir} --sub ID --gw GW", err=True)
    uvicorn.run(
        "gateway.asgi:app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    )


@main.command()
@click.option("--sub", required=True, help="Client id (the token's subject).")
@click.option("--gw", required=True, help="Gateway id the token is valid for.")
@click.option("--role", default="client", show_default=True, type=click.Choice(["client", "admin"]))
@click.option(
    "--claim", "claims", multiple=True, help="Extra claim k=v (repeat; k=a,b for a list)."
)
@click.option("--ttl", default=3600, show_default=True, type=int, help="Seconds until expiry.")
@click.option("--jwt-secret", envvar="LAKESYNC_JWT_SECRET")
@data_dir_option
def token(
    sub: str,
    gw: str,
    role: str,
    claims: tuple[str, ...],
    ttl: int,
    jwt_secret: str | None,
    data_dir: Path,
) -> None:
    """Print a token signed with the configured secret."""
    payload: dict[str, Any] = {"sub": sub, "gw": gw, "role": role}
    for item in claims:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected k=v, got {item!r}", param_hint="--claim")
        if key in ("sub", "gw", "role", "exp"):
            raise click.BadParameter(f"use --{key} for {key!r}", param_hint="--claim")
        payload[key] = value.split(",") if "," in value else value
    secret = resolve_secret(data_dir, jwt_secret, create=False)
    click.echo(sign_token(payload, secret, now_s=int(time.time()), ttl_s=ttl))


@main.command()
@data_dir_option
@click.option("--wal-url", envvar="LAKESYNC_WAL_URL")
@click.option("--gw", help="Only this gateway id.")
def status(data_dir: Path, wal_url: str | None, gw: str | None) -> None:
    """Show WAL counters per gateway id."""
    from .wal.store import WriteAheadLog

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


def _register_optional_commands() -> None:
    try:
        from . import cli_pipeline
    except ImportError as exc:  # the pipeline extra is not installed
        if (
            "cli_pipeline" not in str(exc)
            and "dagster" not in str(exc)
            and "pyspark" not in str(exc)
        ):
            raise
        return
    cli_pipeline.register(main)


_register_optional_commands()

if __name__ == "__main__":
    sys.exit(main())
