"""The one gateway-id rule (``core.identifiers``): what the API accepts, the lake can hold.

The lake check uses the real catalog library (pyiceberg's SQL catalog on a throwaway SQLite
file): every valid id names exactly one namespace level, and an id with a ``.`` — which the API
once accepted — would not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync_platform.core.errors import ValidationError
from lakesync_platform.core.identifiers import (
    GATEWAY_ID_MAX_LENGTH,
    GATEWAY_ID_RE,
    check_gateway_id,
    is_gateway_id,
)
from lakesync_platform.spark.layout import namespace
from lakesync_platform.spark.session import CATALOG

VALID = ["a", "Z", "0", "gw_1", "demo", "tenant-42", "A_b-C", "9lives", "a" * 64]
INVALID = [
    "",
    "a.b",
    "demo.prod",
    ".",
    "a" * 65,
    "_leading",
    "-leading",
    "bad!gw",
    "gätewäy",
    "a b",
    "a/b",
    "a`b",
    "a\x00b",
    "a\n",
]

gateway_ids = st.from_regex(GATEWAY_ID_RE, fullmatch=True)


@pytest.mark.parametrize("gw", VALID)
def test_valid_ids_pass(gw: str) -> None:
    assert check_gateway_id(gw) == gw
    assert is_gateway_id(gw)


@pytest.mark.parametrize("gw", INVALID)
def test_invalid_ids_are_a_validation_error_naming_the_rule(gw: str) -> None:
    assert not is_gateway_id(gw)
    with pytest.raises(ValidationError) as info:
        check_gateway_id(gw)
    assert info.value.message.startswith("Invalid gateway id: ")
    assert "letters, digits, '_' or '-'" in info.value.message
    assert info.value.http_status == 400


def test_non_strings_are_not_ids() -> None:
    assert not is_gateway_id(None)
    assert not is_gateway_id(42)


@given(gateway_ids)
def test_every_valid_id_is_one_quoted_namespace_of_the_lake(gw: str) -> None:
    assert len(gw) <= GATEWAY_ID_MAX_LENGTH
    assert "." not in gw
    assert namespace(gw) == f"{CATALOG}.`{gw}`"


@pytest.mark.parametrize("gw", ["a.b", "_x", "x" * 65])
def test_the_lake_layout_refuses_what_the_api_refuses(gw: str) -> None:
    with pytest.raises(ValidationError, match="Invalid gateway id"):
        namespace(gw)


def test_the_lake_catalog_holds_each_valid_id_as_one_namespace(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "lake", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=tmp_path.as_uri()
    )
    for gw in VALID:
        catalog.create_namespace(gw)
    assert sorted(catalog.list_namespaces()) == sorted((gw,) for gw in VALID)
    # what a dotted id would have become: a namespace nested in another, not the id itself
    catalog.create_namespace("demo.prod")
    assert ("demo",) in catalog.list_namespaces()
    assert ("demo", "prod") in catalog.list_namespaces(("demo",))
