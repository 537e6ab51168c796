"""Pull cursors and view tags.

A pull cursor is one 64-bit integer (sent as a decimal string, as the TS client expects for
``serverHlc``/``since``): the low :data:`POSITION_BITS` bits hold the ingest position, the bits
above a *view tag* — 0 without filtering sync rules, else a hash of the rules and the claims
they read (:meth:`~.config.GatewayConfig.view_tag`). A cursor minted under other rules or
claims carries another tag, so the next pull starts the client's view over from 0 (rows
entering the view arrive whole).
"""

from __future__ import annotations

import hashlib

from ..core.sync_rules import Claims

__all__ = ["MAX_CURSOR", "POSITION_BITS", "compose_cursor", "split_cursor", "view_tag"]

POSITION_BITS = 40
"""Low bits of a pull cursor hold the ingest position; the bits above hold the view tag."""
_POSITION_MASK = (1 << POSITION_BITS) - 1
_TAG_BITS = 22
MAX_CURSOR = (1 << (_TAG_BITS + POSITION_BITS)) - 1
"""The largest cursor a gateway mints; a ``since`` above it names no view of this gateway."""


def compose_cursor(tag: int, position: int) -> int:
    """A pull cursor: the view tag (0 without filtering rules) above the ingest position."""
    return (tag << POSITION_BITS) | position


def split_cursor(cursor: int) -> tuple[int, int]:
    """Inverse of :func:`compose_cursor`."""
    return cursor >> POSITION_BITS, cursor & _POSITION_MASK


def view_tag(rules_key: bytes, claims: Claims) -> int:
    """The view tag of filtering rules (``rules_key``: their canonical JSON) and ``claims``.

    Never 0 (that is the tag of views without filtering rules).
    """
    h = hashlib.sha256(rules_key)
    for k in sorted(claims):
        v = claims[k]
        h.update(b"\0" + k.encode() + b"\1")
        h.update("\2".join([v] if isinstance(v, str) else list(v)).encode())
    return (int.from_bytes(h.digest()[:4], "big") & ((1 << _TAG_BITS) - 1)) | 1
