"""The gateway's route handlers: sync (push, pull, checkpoint, the WebSocket), actions, admin,
connectors, and meta routes."""

from __future__ import annotations

from litestar.types import ControllerRouterHandler

from .actions import ActionController
from .admin import AdminController
from .connectors import ConnectorsController
from .meta import MetaController
from .realtime import sync_socket
from .sync import SyncController

__all__ = [
    "CONTROLLERS",
    "ActionController",
    "AdminController",
    "ConnectorsController",
    "MetaController",
    "SyncController",
    "sync_socket",
]

CONTROLLERS: list[ControllerRouterHandler] = [
    MetaController,
    SyncController,
    ActionController,
    AdminController,
    ConnectorsController,
    sync_socket,
]
"""Every controller the app mounts."""
