"""The gateway's route handlers: sync (push, pull, checkpoint), actions, admin, and meta routes."""

from __future__ import annotations

from .actions import ActionController
from .admin import AdminController
from .meta import MetaController
from .sync import SyncController

__all__ = ["CONTROLLERS", "ActionController", "AdminController", "MetaController", "SyncController"]

CONTROLLERS = [MetaController, SyncController, ActionController, AdminController]
"""Every controller the app mounts."""
