"""The gateway's route handlers: sync (push, pull, checkpoint), admin, and meta routes."""

from __future__ import annotations

from .admin import AdminController
from .meta import MetaController
from .sync import SyncController

__all__ = ["CONTROLLERS", "AdminController", "MetaController", "SyncController"]

CONTROLLERS = [MetaController, SyncController, AdminController]
"""Every controller the app mounts."""
