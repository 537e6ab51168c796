"""Flush requests on SQL: the admin route queues them, the pipeline's sensor runs and marks them."""

from __future__ import annotations

import uuid

from sqlalchemy import select, update

from ..core.wal import FlushRequest
from . import tables as t
from .database import SqlDatabase

__all__ = ["SqlFlushRequests"]


class SqlFlushRequests(SqlDatabase):
    """The queue of flush requests of every gateway id."""

    def request_flush(self, gw: str, now_ms: int) -> FlushRequest:
        """Queue a flush of ``gw`` for the pipeline; return the request."""
        req = FlushRequest(uuid.uuid4().hex, gw, now_ms, "pending", None, now_ms)
        with self.write() as conn:
            conn.execute(
                t.flush_requests.insert().values(
                    request_id=req.request_id,
                    gateway_id=gw,
                    requested_ms=now_ms,
                    status=req.status,
                    detail=None,
                    updated_ms=now_ms,
                )
            )
        return req

    def flush_requests(
        self, gw: str | None = None, status: str | None = "pending", limit: int = 100
    ) -> list[FlushRequest]:
        """Flush requests, newest last, filtered by gateway and status."""
        c = t.flush_requests.c
        query = select(c.request_id, c.gateway_id, c.requested_ms, c.status, c.detail, c.updated_ms)
        if gw is not None:
            query = query.where(c.gateway_id == gw)
        if status is not None:
            query = query.where(c.status == status)
        with self.read() as conn:
            result = conn.execute(query.order_by(c.requested_ms, c.request_id).limit(limit))
            return [FlushRequest(*row) for row in result]

    def recent_flush_requests(self, gw: str, limit: int) -> list[FlushRequest]:
        """The newest ``limit`` flush requests of ``gw`` whatever their status, newest last."""
        c = t.flush_requests.c
        query = (
            select(c.request_id, c.gateway_id, c.requested_ms, c.status, c.detail, c.updated_ms)
            .where(c.gateway_id == gw)
            .order_by(c.requested_ms.desc(), c.request_id.desc())
            .limit(limit)
        )
        with self.read() as conn:
            return [FlushRequest(*row) for row in reversed(conn.execute(query).all())]

    def update_flush_request(
        self, request_id: str, status: str, detail: str | None, now_ms: int
    ) -> None:
        """Record the progress or outcome of a flush request."""
        with self.write() as conn:
            conn.execute(
                update(t.flush_requests)
                .where(t.flush_requests.c.request_id == request_id)
                .values(status=status, detail=detail, updated_ms=now_ms)
            )
