"""The gateway's OpenAPI document (served at ``/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

from lakesync_platform.core.errors import ERRORS_BY_CODE

__all__ = ["openapi_document"]

_HLC = {
    "type": "string",
    "pattern": "^[0-9]{1,20}$",
    "description": "64-bit integer as a decimal string",
}
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string"},
        "code": {
            "type": "string",
            "enum": list(ERRORS_BY_CODE),
        },
        "requestId": {"type": "string"},
    },
}
_DELTA = {
    "type": "object",
    "required": ["op", "table", "rowId", "clientId", "columns", "hlc", "deltaId"],
    "properties": {
        "op": {"type": "string", "enum": ["INSERT", "UPDATE", "DELETE"]},
        "table": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"},
        "rowId": {"type": "string"},
        "clientId": {"type": "string"},
        "columns": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["column", "value"],
                "properties": {"column": {"type": "string"}, "value": {}},
            },
        },
        "hlc": _HLC,
        "deltaId": {"type": "string"},
    },
}


def _err(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_GW = {"name": "gw", "in": "path", "required": True, "schema": {"type": "string"}}
_SECURED: list[dict[str, list[str]]] = [{"bearer": []}]
_ADMIN_ERRORS = {
    "401": _err("Missing or invalid token"),
    "403": _err("Not an admin of this gateway"),
}


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 description of protocol v1 as this gateway serves it."""
    delta_ref = {"$ref": "#/components/schemas/RowDelta"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "LakeSync Platform gateway",
            "version": "1.0.0",
            "description": "LakeSync protocol v1: push/pull column-level deltas.",
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
            },
            "schemas": {"Error": _ERROR, "RowDelta": _DELTA},
        },
        "paths": {
            "/health": {
                "get": {"summary": "Liveness", "responses": {"200": _json({"type": "object"})}}
            },
            "/ready": {
                "get": {
                    "summary": "Readiness (WAL reachable)",
                    "responses": {
                        "200": _json({"type": "object"}),
                        "503": _json({"type": "object"}),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {"200": {"description": "text/plain; version=0.0.4"}},
                }
            },
            "/v1/sync/{gw}/push": {
                "post": {
                    "summary": "Push deltas (accepted whole or rejected whole)",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["clientId", "deltas"],
                                    "properties": {
                                        "clientId": {"type": "string"},
                                        "deltas": {
                                            "type": "array",
                                            "maxItems": 10000,
                                            "items": delta_ref,
                                        },
                                        "lastSeenHlc": _HLC,
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "serverHlc": _HLC,
                                    "accepted": {"type": "integer"},
                                    "deltas": {"type": "array", "items": delta_ref},
                                },
                            }
                        ),
                        "400": _err("Malformed body"),
                        "401": _err("Unauthenticated"),
                        "403": _err("Wrong gateway or client id"),
                        "409": _err("Clock drift"),
                        "413": _err("Body over 1 MiB"),
                        "422": _err("Identifier or schema violation"),
                        "429": _err("Rate limited"),
                        "503": _err("WAL backlog over its bound"),
                    },
                }
            },
            "/v1/sync/{gw}/pull": {
                "get": {
                    "summary": "Pull rows changed after a cursor",
                    "parameters": [
                        _GW,
                        {"name": "since", "in": "query", "required": True, "schema": _HLC},
                        {
                            "name": "clientId",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 10000},
                        },
                        {
                            "name": "format",
                            "in": "query",
                            "schema": {"type": "string", "enum": ["stamped"]},
                            "description": "stamped: one delta per row with per-column stamps",
                        },
                    ],
                    "security": _SECURED,
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "deltas": {"type": "array", "items": delta_ref},
                                    "serverHlc": _HLC,
                                    "hasMore": {"type": "boolean"},
                                },
                            }
                        ),
                        "400": _err("Bad parameters"),
                        "401": _err("Unauthenticated"),
                        "403": _err("Forbidden"),
                    },
                }
            },
            "/v1/sync/{gw}/checkpoint": {
                "get": {
                    "summary": "Initial-sync checkpoint stream",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "responses": {"404": _err("No checkpoint available")},
                }
            },
            "/v1/admin/schema/{gw}": {
                "post": {
                    "summary": "Register or evolve (additively) a table schema",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "responses": {
                        "200": _json({"type": "object"}),
                        "400": _err("Invalid schema"),
                        **_ADMIN_ERRORS,
                    },
                },
                "get": {
                    "summary": "List registered schemas",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "responses": {"200": _json({"type": "object"}), **_ADMIN_ERRORS},
                },
            },
            "/v1/admin/sync-rules/{gw}": {
                "post": {
                    "summary": "Replace the sync rules",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "responses": {
                        "200": _json({"type": "object"}),
                        "400": _err("Invalid rules"),
                        **_ADMIN_ERRORS,
                    },
                },
                "get": {
                    "summary": "Read the sync rules",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "responses": {
                        "200": _json({"type": "object"}),
                        "404": _err("No rules saved"),
                        **_ADMIN_ERRORS,
                    },
                },
            },
            "/v1/admin/metrics/{gw}": {
                "get": {
                    "summary": "Gateway counters",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "responses": {"200": _json({"type": "object"}), **_ADMIN_ERRORS},
                }
            },
            "/v1/admin/flush/{gw}": {
                "post": {
                    "summary": "Request a flush of the WAL to the lake",
                    "parameters": [_GW],
                    "security": _SECURED,
                    "responses": {"202": _json({"type": "object"}), **_ADMIN_ERRORS},
                }
            },
        },
    }
