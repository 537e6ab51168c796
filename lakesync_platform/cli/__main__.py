"""``python -m lakesync_platform.cli``: the ``lakesync`` command."""

from __future__ import annotations

from . import main

if __name__ == "__main__":
    main()
