"""Gateway ids: the one rule every part of the platform checks them by.

A gateway id names a tenant of the sync API (``/v1/sync/{gw}/…``), a key in the WAL, and the
Iceberg namespace ``lakesync.<gw>`` that the pipeline flushes it into. The rule is the one all
three can hold: 1 to 64 characters, ASCII letters, digits, ``_`` and ``-``, starting with a letter
or a digit.

The reference gateway accepts any string (PROTOCOL.md §7: one Durable Object per id). We are
narrower because the id becomes a lake namespace: a ``.`` is the namespace separator of Iceberg
catalogs (``a.b`` would be namespace ``b`` inside ``a``), so an id with a dot could be accepted
by the API and never flushed. The API enforces the rule (400 ``VALIDATION_ERROR``) before it
reads a token or touches the WAL.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import ValidationError

__all__ = ["GATEWAY_ID_MAX_LENGTH", "GATEWAY_ID_RE", "check_gateway_id", "is_gateway_id"]

GATEWAY_ID_MAX_LENGTH: Final = 64
GATEWAY_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}")
"""The gateway id rule (see the module docstring); match with ``fullmatch``."""


def is_gateway_id(value: object) -> bool:
    """Whether ``value`` is a valid gateway id."""
    return isinstance(value, str) and GATEWAY_ID_RE.fullmatch(value) is not None


def check_gateway_id(gw: str) -> str:
    """Return ``gw`` if it is a valid gateway id, else raise :class:`ValidationError`.

    The message names the rule, so a client that picked a bad id learns how to fix it.
    """
    if not is_gateway_id(gw):
        raise ValidationError(
            f"Invalid gateway id: {gw[:80]!r} (1-{GATEWAY_ID_MAX_LENGTH} characters: letters, "
            "digits, '_' or '-', starting with a letter or digit)"
        )
    return gw
