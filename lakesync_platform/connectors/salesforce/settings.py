"""Salesforce's REST API as the connector uses it: paths, field types and relationship
columns, declared as data.

Records come from ``GET /services/data/<version>/queryAll?q=<SOQL>`` (deleted ones too, with
``IsDeleted``), paged by ``nextRecordsUrl``; fields from ``…/sobjects/<name>/describe``; the
daily API allowance from the ``Sforce-Limit-Info`` header of every answer, or ``…/limits``;
first loads above the configured size from the Bulk API 2.0 (``…/jobs/query``).
"""

from __future__ import annotations

from typing import Final

from ..http import Endpoint, NextUrl

__all__ = [
    "BOOLEAN_TYPES",
    "BULK_PAGE_RECORDS",
    "CURSOR_FIELD",
    "DELETED_FIELD",
    "ID_FIELD",
    "NUMBER_TYPES",
    "RELATIONSHIP_NAMES",
    "SKIPPED_TYPES",
    "SOURCE",
    "data_path",
    "query_endpoint",
]

SOURCE: Final = "Salesforce"
ID_FIELD: Final = "Id"
DELETED_FIELD: Final = "IsDeleted"
CURSOR_FIELD: Final = "SystemModstamp"
"""Moves on every change, system ones and deletes included (``LastModifiedDate`` does not)."""
SKIPPED_TYPES: Final = frozenset({"address", "location", "base64"})
"""Compound fields (their components are fields of their own) and file bodies."""
NUMBER_TYPES: Final = frozenset({"int", "long", "double", "currency", "percent"})
BOOLEAN_TYPES: Final = frozenset({"boolean"})
RELATIONSHIP_NAMES: Final = {"OwnerId": "Owner.Name", "AccountId": "Account.Name"}
"""Reference fields whose related record's name is a column too (the reference's
``owner_name`` and ``account_name``)."""
BULK_PAGE_RECORDS: Final = 10_000
"""Records per Bulk API 2.0 results page (one page is held at a time)."""


def data_path(version: str, tail: str) -> str:
    """``/services/data/<version>/<tail>``."""
    return f"/services/data/{version}/{tail}"


def query_endpoint(version: str, soql: str, *, deleted: bool) -> Endpoint:
    """A SOQL query through ``queryAll`` (deleted records too) or ``query``."""
    return Endpoint(
        data_path(version, "queryAll" if deleted else "query"),
        params={"q": soql},
        records_path=("records",),
        paginator=NextUrl(),
        source=SOURCE,
    )
