"""Gateway settings: read once at the process edge (CLI), passed down explicitly."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GatewaySettings"]


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything the gateway process is configured with.

    ``jwt_secrets`` are tried in order (primary first, then previous ones during rotation).
    Auth is on unless ``auth_enabled`` is explicitly false (local development only).
    """

    wal_url: str
    jwt_secrets: tuple[str, ...] = ()
    auth_enabled: bool = True
    max_backlog_bytes: int | None = None
    rate_limit: int | None = None
    rate_window_s: int = 60
    allowed_origins: tuple[str, ...] | None = None
    max_body_bytes: int = 1_048_576
    request_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.auth_enabled and not self.jwt_secrets:
            raise ValueError("auth is enabled but no JWT secret is configured")
