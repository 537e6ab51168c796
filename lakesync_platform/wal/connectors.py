"""The config store's connectors: registered connector configs and their per-stream state.

A config is stored as validated ``ConnectorConfig`` JSON (secrets only as ``${VAR}``
references, :mod:`lakesync_platform.core.connectors`). A stream's state (its cursor) is one
JSON object per ``(gateway, connector, stream)``, written by the poller only after the WAL
committed the changes it covers; deleting a connector deletes its state.
"""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy import delete, select

from ..core.connectors import ConnectorConfig, connector_config_to_json, parse_connector_config
from ..core.errors import ValidationError
from . import tables as t
from .database import SqlDatabase

__all__ = ["SqlConnectorStore"]

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


class SqlConnectorStore(SqlDatabase):
    """Connectors and connector state of every gateway id."""

    def connectors(self, gw: str) -> dict[str, ConnectorConfig]:
        """The connectors registered for ``gw`` by name."""
        c = t.connectors.c
        with self.read() as conn:
            result = conn.execute(
                select(c.name, c.config_json).where(c.gateway_id == gw).order_by(c.name)
            )
            return {name: parse_connector_config(_json_decode(js)) for name, js in result}

    def save_connector(
        self, gw: str, cfg: ConnectorConfig, now_ms: int = 0, *, replace: bool = False
    ) -> None:
        """Register ``cfg``; an existing name is a 409 :class:`ValidationError` unless
        ``replace`` (declarations re-applied) — its state is kept then."""
        c = t.connectors.c
        body = _json_encode(connector_config_to_json(cfg)).decode()
        with self.write() as conn:
            exists = conn.execute(
                select(c.name).where(c.gateway_id == gw, c.name == cfg.name)
            ).first()
            if exists is not None and not replace:
                raise ValidationError(
                    f'Connector "{cfg.name}" is already registered', http_status=409
                )
            stmt = self._insert(t.connectors).values(
                gateway_id=gw, name=cfg.name, config_json=body, updated_ms=now_ms
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["gateway_id", "name"],
                    set_={"config_json": body, "updated_ms": now_ms},
                )
            )

    def delete_connector(self, gw: str, name: str) -> bool:
        """Unregister ``name`` and drop its state; ``False`` if it was not registered."""
        c, s = t.connectors.c, t.connector_state.c
        with self.write() as conn:
            gone = conn.execute(delete(t.connectors).where(c.gateway_id == gw, c.name == name))
            conn.execute(delete(t.connector_state).where(s.gateway_id == gw, s.connector == name))
            return bool(gone.rowcount)

    def connector_state(self, gw: str, name: str) -> dict[str, dict[str, Any]]:
        """Each stream's saved state (cursor) of connector ``name``."""
        s = t.connector_state.c
        with self.read() as conn:
            result = conn.execute(
                select(s.stream, s.state_json).where(s.gateway_id == gw, s.connector == name)
            )
            return {stream: _json_decode(js) for stream, js in result}

    def save_connector_state(
        self, gw: str, name: str, stream: str, state: dict[str, Any], now_ms: int = 0
    ) -> None:
        """Durably record ``stream``'s state (call only after the WAL committed what it
        covers)."""
        body = _json_encode(state).decode()
        stmt = self._insert(t.connector_state).values(
            gateway_id=gw, connector=name, stream=stream, state_json=body, updated_ms=now_ms
        )
        with self.write() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["gateway_id", "connector", "stream"],
                    set_={"state_json": body, "updated_ms": now_ms},
                )
            )
