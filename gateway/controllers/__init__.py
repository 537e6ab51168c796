"""The gateway's route handlers: sync (push, pull, checkpoint), admin, connectors and meta
routes."""

from __future__ import annotations

from .admin import AdminController
from .connectors import ConnectorsController
from .meta import MetaController
from .sync import SyncController

__all__ = [
    "CONTROLLERS",
    "AdminController",
    "ConnectorsController",
    "MetaController",
    "SyncController",
]

CONTROLLERS = [MetaController, SyncController, AdminController, ConnectorsController]
"""Every controller the app mounts."""
