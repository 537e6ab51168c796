"""ASGI entry point for uvicorn: builds the app from the settings the CLI handed over.

``lakesync gateway`` parses flags and environment once, serialises the result into
``LAKESYNC_GATEWAY_CONFIG`` and starts uvicorn with ``gateway.asgi:app`` as a factory, so every
worker process builds an identical app.
"""

from __future__ import annotations

import json
import os

from .app import create_app
from .middleware import ProtocolHeadersMiddleware
from .settings import GatewaySettings

__all__ = ["CONFIG_ENV", "app", "settings_from_json"]

CONFIG_ENV = "LAKESYNC_GATEWAY_CONFIG"


def settings_from_json(text: str) -> GatewaySettings:
    """Inverse of the CLI's serialisation."""
    raw = json.loads(text)
    raw["jwt_secrets"] = tuple(raw.get("jwt_secrets") or ())
    if raw.get("allowed_origins") is not None:
        raw["allowed_origins"] = tuple(raw["allowed_origins"])
    return GatewaySettings(**raw)


def app() -> ProtocolHeadersMiddleware:
    """uvicorn factory."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        raise RuntimeError(f"{CONFIG_ENV} is not set; start the gateway with `lakesync gateway`")
    return create_app(settings_from_json(text))
