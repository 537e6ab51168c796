"""How a stage shows its progress while it runs: a ``step`` callable the caller passes in.

``step("compact demo.todos")`` returns a context manager around one unit of work (a table);
``lakesync run`` and ``lakesync migrate`` pass :meth:`lakesync_platform.cli.progress.Progress.step`,
which prints ``… `` and ``done in 1.2 s`` lines; Dagster assets pass nothing (:func:`quiet_step`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

__all__ = ["Step", "quiet_step"]

Step = Callable[[str], AbstractContextManager[None]]
"""Progress: announces one unit of a stage's work (a table) and times it."""


def quiet_step(_what: str) -> AbstractContextManager[None]:
    """A step that shows nothing."""
    return nullcontext()
