"""Small persistent settings of a client: its id, pull cursor and clock high-water mark.

Stored in ``_lakesync_kv(key, value)`` in the client's SQLite file, so a restarted client
resumes pulling where it stopped (the reference keeps its cursor in memory only and re-pulls
everything after each restart, PROTOCOL.md §12) and never issues an HLC below one it issued or
received before.
"""

from __future__ import annotations

from ._db import LocalDB

__all__ = ["KV_DDL", "SyncState"]

KV_DDL = "CREATE TABLE IF NOT EXISTS _lakesync_kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

CURSOR = "cursor"
CLIENT_ID = "client_id"
HLC_HIGH = "hlc_high"
LAST_SYNC = "last_sync_ms"


class SyncState:
    """Typed access to ``_lakesync_kv``."""

    def __init__(self, db: LocalDB) -> None:
        self._db = db

    def create(self) -> None:
        """Create the table if needed."""
        self._db.exec(KV_DDL)

    def get(self, key: str) -> str | None:
        """The stored value of ``key``."""
        rows = self._db.query_tuples("SELECT value FROM _lakesync_kv WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``."""
        self._db.exec(
            "INSERT INTO _lakesync_kv (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @property
    def cursor(self) -> int:
        """The server cursor after the last applied pull page (0 = never pulled)."""
        return int(self.get(CURSOR) or 0)

    @cursor.setter
    def cursor(self, value: int) -> None:
        self.set(CURSOR, str(value))

    def source_cursor(self, source: str) -> int:
        """The cursor after the last applied page of ``source`` (0 = never pulled from it)."""
        return int(self.get(f"{CURSOR}:source:{source}") or 0)

    def set_source_cursor(self, source: str, value: int) -> None:
        """Store the cursor of ``source``."""
        self.set(f"{CURSOR}:source:{source}", str(value))

    @property
    def client_id(self) -> str | None:
        """The client id this database belongs to."""
        return self.get(CLIENT_ID)

    @client_id.setter
    def client_id(self, value: str) -> None:
        self.set(CLIENT_ID, value)

    @property
    def hlc_high(self) -> int:
        """An HLC at least as high as every stamp this client issued or saw (0 if none)."""
        return int(self.get(HLC_HIGH) or 0)

    @hlc_high.setter
    def hlc_high(self, value: int) -> None:
        self.set(HLC_HIGH, str(value))

    @property
    def last_sync_ms(self) -> int | None:
        """When the last pull or push succeeded (epoch ms), if ever."""
        value = self.get(LAST_SYNC)
        return None if value is None else int(value)

    @last_sync_ms.setter
    def last_sync_ms(self, value: int) -> None:
        self.set(LAST_SYNC, str(value))
