"""How the ``lakesync`` commands show long work and where library logs go.

* :class:`Progress` — step lines on stderr (``flush demo …``, then ``flush demo done in 1.2 s``),
  silent under ``--json``; its :meth:`Progress.step` is the ``step`` the pipeline's stages take.
* :func:`warnings_to_stderr` — the package's warnings (a stage waiting for the lake's lock) as
  plain lines on stderr.
* :func:`libraries_logged_to` — warnings other libraries log in Python (pyiceberg's, py4j's)
  into a file for the command's run (``<data-dir>/logs/run.log``), not onto the terminal.

Used by ``lakesync run``, ``lakesync query``/``history`` and ``lakesync migrate``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

__all__ = ["Progress", "libraries_logged_to", "warnings_to_stderr"]

_STDERR_HANDLER = "lakesync-cli-stderr"


class Progress:
    """Step lines on stderr — ``flush demo …`` then ``flush demo done in 1.2 s`` — unless quiet
    (``--json``)."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """Announce ``what``, run the block, say how long it took (or that it failed); a
        parenthesis in ``what`` (``(JVM log: …)``) is left out of the closing line."""
        if not self.quiet:
            click.echo(f"{what} …", err=True)
        started = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            if not self.quiet:
                outcome = "done" if ok else "failed"
                click.echo(
                    f"{what.split(' (')[0]} {outcome} in {time.monotonic() - started:.1f} s",
                    err=True,
                )

    def note(self, line: str) -> None:
        """One line inside a step (``  todos: 20 000 rows copied``), unless quiet."""
        if not self.quiet:
            click.echo(line, err=True)


def warnings_to_stderr() -> None:
    """Warnings of the package as plain lines on stderr (once per process); records still
    propagate, so a host's own logging sees them as well."""
    package = logging.getLogger("lakesync_platform")
    if not any(h.get_name() == _STDERR_HANDLER for h in package.handlers):
        handler = _EchoHandler(logging.WARNING)
        handler.set_name(_STDERR_HANDLER)
        package.addHandler(handler)


@contextmanager
def libraries_logged_to(path: Path) -> Iterator[None]:
    """Warnings other libraries log in Python (pyiceberg's, py4j's) go into ``path`` while the
    block runs; the handler is removed and closed at its end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


class _EchoHandler(logging.Handler):
    """A log record's message on the current stderr (looked up at each record)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Echo ``record``'s message to stderr."""
        click.echo(record.getMessage(), err=True)
