"""The pure parts of running on either kind of Spark session (classic or Spark Connect): table
names for pyiceberg, the query wrapper of time travel, Spark errors read from their text, JDBC
quoting, orphan listing's hidden files and the procedures' timestamp literals."""

from __future__ import annotations

import pytest

from lakesync_platform.spark.java_errors import error_class, message_parameter
from lakesync_platform.spark.snapshots import table_identifier
from lakesync_platform.spark.timetravel import _as_subquery
from lakesync_platform.spark.upkeep import _hidden, _timestamp
from lakesync_platform.spark.wal_source import JdbcSource


def test_table_identifier_unquotes_spark_names() -> None:
    assert table_identifier("lakesync.`gw_1`.`todos`") == ("gw_1", "todos")
    assert table_identifier("`g`.`a.b`") == ("g", "a.b")
    assert table_identifier("lakesync.`g`.`we``ird`") == ("g", "we`ird")
    with pytest.raises(ValueError, match="not a table"):
        table_identifier("other.`g`.`t`")


def test_a_query_runs_as_a_bounded_subquery() -> None:
    wrapped = _as_subquery("SELECT 1 -- trailing comment;  \n;", 11)
    assert wrapped == "SELECT * FROM (\nSELECT 1 -- trailing comment\n) AS lakesync_query LIMIT 11"


class _ConnectStyle(Exception):
    """What a Spark Connect 3.5 client raises: the message only, no error class fields."""


def test_errors_are_read_from_their_fields_or_their_text() -> None:
    text = (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `todos` cannot be found. Verify the "
        "spelling and correctness of the schema and catalog.\nIf you did not qualify …"
    )
    exc = _ConnectStyle(text)
    assert error_class(exc) == "TABLE_OR_VIEW_NOT_FOUND"
    assert message_parameter(exc, "relationName") == "`todos`"
    assert (
        message_parameter(_ConnectStyle("[UNRESOLVED_COLUMN.WITH_SUGGESTION] x"), "relationName")
        is None
    )

    class Classic(Exception):
        def getErrorClass(self) -> str:
            return "TABLE_OR_VIEW_NOT_FOUND"

        def getMessageParameters(self) -> dict[str, str]:
            return {"relationName": "`spark_catalog`.`x`"}

    assert message_parameter(Classic("no text"), "relationName") == "`spark_catalog`.`x`"


def test_jdbc_identifiers_are_quoted_as_sparks_dialects_quote_them() -> None:
    assert JdbcSource("jdbc:postgresql://h/db", "d").quote_identifier('i"d') == '"i""d"'
    assert JdbcSource("jdbc:mysql://h/db", "d").quote_identifier("id") == "`id`"
    assert JdbcSource("jdbc:sqlite:/x.db", "d").quote_identifier("id") == '"id"'


def test_orphan_listing_leaves_hidden_files_alone() -> None:
    root = "file:///w/gw/t"
    assert not _hidden("file:///w/gw/t/data/table=x/a.parquet", root)
    assert _hidden("file:///w/gw/t/data/.a.parquet.crc", root)
    assert _hidden("file:/w/gw/t/_tmp/a.parquet", root)
    assert not _hidden("s3://b/w/gw/t/metadata/v1.metadata.json", "s3://b/w/gw/t")


def test_procedure_timestamps_are_utc_literals() -> None:
    assert _timestamp(1_767_000_000_123) == "TIMESTAMP '2025-12-29T09:20:00.123+00:00'"
