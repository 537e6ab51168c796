"""The ``sql`` action handler: each action type runs one declared, parameterised statement.

A statement names its parameters SQLAlchemy-style (``:row_id``); every name must be a declared
parameter of the action type or one of :data:`CONTEXT_PARAMS` (who asked), so nothing but bound
values ever reaches the SQL text. An action runs its statement in one transaction on the
declared destination; the result's data is ``{"rowCount": n}`` plus ``"rows"`` (a list of
objects) when the statement returns rows (``SELECT``, ``RETURNING``). A connection failure is a
retryable failure; any other database error (a constraint, a type) is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
from sqlalchemy import TextClause, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError

from ..core.actions import Action, ActionContext, ActionDescriptor
from ..core.errors import ActionError
from .sql import SqlAdapter

__all__ = ["CONTEXT_PARAMS", "SqlActionHandler"]

CONTEXT_PARAMS: Final = ("lakesync_action_id", "lakesync_client_id", "lakesync_gateway_id")
"""Parameters every statement may use besides its declared ones: the action's id, the client
that sent it, and its gateway id."""


class SqlActionHandler:
    """An :class:`~lakesync_platform.core.actions.ActionHandler` over one SQL database."""

    def __init__(
        self, url: str, actions: Sequence[tuple[ActionDescriptor, str]], *, name: str = "sql"
    ) -> None:
        """``actions`` pairs each descriptor with its statement; raises :class:`ValueError`
        for a statement that uses an undeclared parameter."""
        self._statements: dict[str, tuple[TextClause, tuple[str, ...]]] = {}
        for descriptor, sql in actions:
            stmt = text(sql)
            declared = descriptor.params.__struct_fields__ if descriptor.params else ()
            unknown = set(stmt._bindparams) - set(declared) - set(CONTEXT_PARAMS)
            if unknown:
                raise ValueError(
                    f"action {name}.{descriptor.action_type}: the statement uses undeclared"
                    f" parameters {', '.join(sorted(unknown))}"
                )
            self._statements[descriptor.action_type] = (stmt, tuple(declared))
        self._descriptors = tuple(d for d, _ in actions)
        self._adapter = SqlAdapter.connect(url)

    @property
    def descriptors(self) -> Sequence[ActionDescriptor]:
        """The declared action types."""
        return self._descriptors

    def execute(self, action: Action, context: ActionContext) -> Mapping[str, Any]:
        """Run the action type's statement with the action's params bound."""
        stmt, declared = self._statements[action.action_type]
        binds: dict[str, Any] = {name: action.params.get(name) for name in declared}
        binds.update(
            lakesync_action_id=action.action_id,
            lakesync_client_id=context.client_id,
            lakesync_gateway_id=context.gateway_id,
        )
        used = {k: v for k, v in binds.items() if k in stmt._bindparams}
        try:
            with self._adapter.engine.begin() as conn:
                result = conn.execute(stmt, used)
                data: dict[str, Any] = {"rowCount": result.rowcount}
                if result.returns_rows:
                    rows = [dict(row._mapping) for row in result]
                    data["rows"] = msgspec.to_builtins(rows, enc_hook=str)
                    data["rowCount"] = len(rows)
        except (OperationalError, InterfaceError) as exc:
            raise ActionError(_message(exc), retryable=True) from exc
        except SQLAlchemyError as exc:
            raise ActionError(_message(exc), retryable=False) from exc
        return data

    def close(self) -> None:
        """Release every connection."""
        self._adapter.close()


def _message(exc: SQLAlchemyError) -> str:
    """The driver's message without SQLAlchemy's statement dump and help link."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return f"{exc.orig.__class__.__name__}: {str(exc.orig).strip()[:300]}"
    return f"{exc.__class__.__name__}: {str(exc)[:300]}"
