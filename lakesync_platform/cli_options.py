"""Options shared by every ``lakesync`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

__all__ = ["DEFAULT_DATA_DIR", "data_dir_option"]

DEFAULT_DATA_DIR = "./data"


def data_dir_option(fn: Any) -> Any:
    """``--data-dir`` with ``LAKESYNC_DATA_DIR`` as fallback."""
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="LAKESYNC_DATA_DIR",
        default=DEFAULT_DATA_DIR,
        show_default=True,
        help="Directory holding every embedded default (WAL, catalog, warehouse, jars, secrets).",
    )(fn)
