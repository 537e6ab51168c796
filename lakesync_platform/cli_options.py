"""Options shared by every ``lakesync`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .settings import DEFAULT_DATA_DIR, ENV_DATA_DIR

__all__ = ["data_dir_option"]


def data_dir_option(fn: Any) -> Any:
    """``--data-dir`` with ``LAKESYNC_DATA_DIR`` as fallback."""
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar=ENV_DATA_DIR,
        default=str(DEFAULT_DATA_DIR),
        show_default=True,
        help="Directory holding every embedded default (WAL, catalog, warehouse, jars, secrets).",
    )(fn)
