"""Action results on SQL: claims and stored results, keyed by action id and idempotency key.

A claim is a row per key (``wal_actions``), inserted with ``ON CONFLICT DO NOTHING`` in one
transaction: of two concurrent claims of a key — threads of one process, or gateway processes
sharing one PostgreSQL database — one inserts it and the other waits for that commit, inserts
nothing, and rolls back to read the winner's row instead. The row says ``running`` until its
owner stores the result (``done``) or releases it (deleted: a retryable failure); a claim older
than the lease is an owner that crashed, and is taken over.

Costs: a stored result is looked up in a read transaction first (results never change once
stored), so a duplicate writes nothing. A claim and a release are bookkeeping commits that need
not wait for the disk (visible to every process at once; a database crash may lose them, and
then the action runs again on retry — as it does anyway when the gateway crashes between the
handler and storing its result); storing a result is a durable commit.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, select, update

from ..core.wal import ActionClaim
from . import tables as t
from .database import SqlDatabase

__all__ = ["SqlActions"]

_RUNNING = "running"
_DONE = "done"
_CLAIM_ATTEMPTS = 5


class _Raced(Exception):
    """Another transaction claimed one of the keys first; read again."""


class SqlActions(SqlDatabase):
    """Claims and stored results of every gateway's actions."""

    def claim_action(
        self,
        gw: str,
        client_id: str,
        keys: Sequence[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
    ) -> ActionClaim:
        """Claim ``keys`` for ``owner``, or report the stored result or the running claim."""
        c = t.actions.c
        with self.read() as conn:
            stored = dict(
                conn.execute(
                    select(c.action_key, c.result_json).where(
                        c.gateway_id == gw,
                        c.client_id == client_id,
                        c.action_key.in_(keys),
                        c.status == _DONE,
                    )
                )
                .tuples()
                .all()
            )
        for key in keys:
            if key in stored:
                return ActionClaim("stored", stored[key])
        for _ in range(_CLAIM_ATTEMPTS):
            try:
                with self._bookkeeping() as conn:
                    return self._claim(conn, gw, client_id, keys, owner, now_ms, lease_ms)
            except _Raced:
                continue
        return ActionClaim("running")  # pragma: no cover - a key contended five times over

    def _claim(
        self,
        conn: Connection,
        gw: str,
        client_id: str,
        keys: Sequence[str],
        owner: str,
        now_ms: int,
        lease_ms: int,
    ) -> ActionClaim:
        c = t.actions.c
        found = {
            row.action_key: row
            for row in conn.execute(
                select(c.action_key, c.owner, c.status, c.result_json, c.claimed_ms)
                .where(c.gateway_id == gw, c.client_id == client_id, c.action_key.in_(keys))
                .with_for_update()
            )
        }
        for key in keys:
            row = found.get(key)
            if row is not None and row.status == _DONE:
                return ActionClaim("stored", row.result_json)
        if any(row.claimed_ms > now_ms - lease_ms for row in found.values()):
            return ActionClaim("running")
        for key, row in found.items():  # expired claims: their owners crashed
            conn.execute(
                delete(t.actions).where(
                    c.gateway_id == gw,
                    c.client_id == client_id,
                    c.action_key == key,
                    c.owner == row.owner,
                )
            )
        for key in keys:
            stmt = self._insert(t.actions).values(
                gateway_id=gw,
                client_id=client_id,
                action_key=key,
                owner=owner,
                status=_RUNNING,
                result_json=None,
                claimed_ms=now_ms,
                updated_ms=now_ms,
            )
            claimed = stmt.on_conflict_do_nothing().returning(t.actions.c.action_key)
            if conn.execute(claimed).first() is None:
                raise _Raced
        return ActionClaim("claimed")

    def finish_action(
        self,
        gw: str,
        client_id: str,
        keys: Sequence[str],
        owner: str,
        result_json: str | None,
        now_ms: int,
    ) -> bool:
        """Store ``result_json`` under ``owner``'s claim of ``keys`` (``None``: release it)."""
        c = t.actions.c
        where = (
            c.gateway_id == gw,
            c.client_id == client_id,
            c.action_key.in_(keys),
            c.owner == owner,
            c.status == _RUNNING,
        )
        if result_json is None:
            with self._bookkeeping() as conn:
                return bool(conn.execute(delete(t.actions).where(*where)).rowcount)
        with self.write() as conn:
            done = conn.execute(
                update(t.actions)
                .where(*where)
                .values(status=_DONE, result_json=result_json, updated_ms=now_ms)
            ).rowcount
        return bool(done)

    def purge_actions(self, before_ms: int) -> int:
        """Forget results and claims last written before ``before_ms``."""
        with self.write() as conn:
            purged: int = conn.execute(
                delete(t.actions).where(t.actions.c.updated_ms < before_ms)
            ).rowcount
        return purged
