"""Options and values shared by several ``lakesync`` commands."""

from __future__ import annotations

import secrets
import stat
from pathlib import Path
from typing import Any

import click

from ..settings import (
    DEFAULT_DATA_DIR,
    DEFAULT_DEFS_DIR,
    ENV_DATA_DIR,
    ENV_DEFS_DIR,
    ENV_JWT_SECRET,
    DataLayout,
)

__all__ = ["data_dir_option", "defs_dir_option", "resolve_secret"]


def data_dir_option(fn: Any) -> Any:
    """``--data-dir``, falling back to the data directory's environment variable."""
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar=ENV_DATA_DIR,
        default=str(DEFAULT_DATA_DIR),
        show_default=True,
        help="Directory holding every embedded default (WAL, catalog, warehouse, jars, secrets).",
    )(fn)


def defs_dir_option(fn: Any) -> Any:
    """``--defs``, falling back to the declarations folder's environment variable."""
    return click.option(
        "--defs",
        "defs_dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar=ENV_DEFS_DIR,
        default=str(DEFAULT_DEFS_DIR),
        show_default=True,
        help="Folder of YAML declarations (tables, destinations).",
    )(fn)


def resolve_secret(data_dir: Path, given: str | None, *, create: bool) -> str:
    """The JWT secret: the flag/env value, else the data directory's secret file.

    With ``create``, a missing file is created with a fresh random secret (owner-only access).
    """
    if given:
        return given
    path = DataLayout.at(data_dir).jwt_secret_file
    if path.exists():
        return path.read_text().strip()
    if not create:
        raise click.UsageError(
            f"No JWT secret: pass --jwt-secret, set {ENV_JWT_SECRET}, or start the gateway "
            f"once with --data-dir {data_dir} to create {path}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path.read_text().strip()
