"""The config store's connectors, on every store: register, list, replace, delete, state."""

from __future__ import annotations

import pytest

from lakesync_platform.core.connectors import parse_connector_config
from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.wal import WalStore

BODY = {
    "name": "crm",
    "type": "postgres",
    "postgres": {"connectionString": "postgresql://app:${CRM_PW}@db/crm"},
    "ingest": {"tables": [{"table": "customers", "strategy": {"type": "diff"}}]},
}


def test_connectors_and_their_state_are_kept_per_gateway(store: WalStore) -> None:
    cfg = parse_connector_config(BODY)
    store.save_connector("a", cfg, 1)  # type: ignore[attr-defined]
    assert store.connectors("a") == {"crm": cfg}  # type: ignore[attr-defined]
    assert store.connectors("b") == {}  # type: ignore[attr-defined]
    assert "a" in store.gateway_ids()
    with pytest.raises(ValidationError) as err:
        store.save_connector("a", cfg, 2)  # type: ignore[attr-defined]
    assert err.value.http_status == 409
    store.save_connector_state("a", "crm", "customers", {"cursor": 5}, 3)  # type: ignore[attr-defined]
    changed = parse_connector_config({**BODY, "schedule": "0 * * * *"})
    store.save_connector("a", changed, 4, replace=True)  # type: ignore[attr-defined]
    assert store.connectors("a")["crm"].schedule == "0 * * * *"  # type: ignore[attr-defined]
    assert store.connector_state("a", "crm") == {"customers": {"cursor": 5}}  # type: ignore[attr-defined]
    assert store.connector_state("b", "crm") == {}  # type: ignore[attr-defined]
    assert store.delete_connector("a", "crm") is True  # type: ignore[attr-defined]
    assert store.delete_connector("a", "crm") is False  # type: ignore[attr-defined]
    assert store.connector_state("a", "crm") == {}  # type: ignore[attr-defined]
