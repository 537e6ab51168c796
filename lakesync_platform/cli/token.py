"""``lakesync token``: mint a token signed with the gateway's secret."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from ..core.auth import sign_token
from ..settings import ENV_JWT_SECRET
from .options import data_dir_option, resolve_secret

__all__ = ["token"]


@click.command()
@click.option("--sub", required=True, help="Client id (the token's subject).")
@click.option("--gw", required=True, help="Gateway id the token is valid for.")
@click.option("--role", default="client", show_default=True, type=click.Choice(["client", "admin"]))
@click.option(
    "--claim", "claims", multiple=True, help="Extra claim k=v (repeat; k=a,b for a list)."
)
@click.option("--ttl", default=3600, show_default=True, type=int, help="Seconds until expiry.")
@click.option("--jwt-secret", envvar=ENV_JWT_SECRET)
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
