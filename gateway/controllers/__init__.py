"""The gateway's route handlers: sync (push, pull, checkpoint, the WebSocket), admin, and meta
routes."""

from __future__ import annotations

from .admin import AdminController
from .meta import MetaController
from .realtime import sync_socket
from .sync import SyncController

__all__ = [
    "CONTROLLERS",
    "AdminController",
    "MetaController",
    "SyncController",
    "sync_socket",
]

CONTROLLERS = [MetaController, SyncController, AdminController, sync_socket]
"""Every controller the app mounts."""
