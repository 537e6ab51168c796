"""The lifecycle's operator surface without Spark: ``lakesync status`` shows the hot WAL's floor
and size; bad retention settings and bad lifecycle blocks are one clear line each."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lakesync_platform.cli import main
from lakesync_platform.core.hlc import encode
from lakesync_platform.declarations import DeclarationError, parse_declarations
from lakesync_platform.settings import (
    ENV_WAL_RETENTION_ENTRIES,
    ENV_WAL_RETENTION_SECONDS,
    DataLayout,
    PipelineSettings,
    RetentionSettings,
)
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import make_delta

NOW = 1_767_000_000_000


def test_status_shows_the_wal_floor_and_size(tmp_path: Path) -> None:
    wal = WriteAheadLog.open(DataLayout.at(tmp_path).wal_url)
    try:
        service = SyncService(wal, clock=lambda: NOW)
        deltas = [make_delta("a", encode(NOW, i), "t", f"r{i}", {"x": i}) for i in range(5)]
        service.push("demo", "a", deltas)
        wal.set_flush_watermark("demo", 3)
        assert wal.trim("demo", 3) == 3
    finally:
        wal.close()
    result = CliRunner().invoke(main, ["status", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("demo: cursor=5 flushed_to=3 ")
    assert lines[1].startswith("hot WAL: ") and "bytes on disk" in lines[1]
    assert lines[2] == "  demo: floor=3 entries=2"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (ENV_WAL_RETENTION_SECONDS, "a day", "must be a number of seconds"),
        (ENV_WAL_RETENTION_ENTRIES, "-5", "must be a whole number of entries"),
    ],
)
def test_bad_retention_settings_are_one_clear_line(
    tmp_path: Path, name: str, value: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PipelineSettings.from_env({name: value}, data_dir=tmp_path)
    result = CliRunner().invoke(
        main, ["run", "trim", "--data-dir", str(tmp_path)], env={name: value}
    )
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output
    with pytest.raises(ValueError, match="batch"):
        RetentionSettings(batch=0)


TABLES = {"gateway": "g", "tables": [{"table": "t", "columns": [{"name": "a", "type": "string"}]}]}
HOT = {"name": "hot", "kind": "postgres", "url": "postgresql://h/db"}
COLD = {"name": "cold", "kind": "sqlite", "url": "sqlite:///c.db", "role": "cold"}


@pytest.mark.parametrize(
    ("destinations", "message"),
    [
        (
            [{**HOT, "lifecycle": {"to": "cold", "after": "30d"}}, COLD],
            "Invalid ISO8601 duration - at `$.destinations[0].lifecycle.after`",
        ),
        (
            [{**HOT, "lifecycle": {"to": "cold", "after": "PT0S"}}, COLD],
            "lifecycle after must be a positive duration",
        ),
        ([{**HOT, "lifecycle": {"to": "nope", "after": "P1D"}}, COLD], "which is not declared"),
        (
            [
                {**HOT, "lifecycle": {"to": "other", "after": "P1D"}},
                {**COLD, "name": "other", "role": "primary"},
            ],
            "whose role is not cold",
        ),
        ([HOT, COLD], "has role cold but no destination's lifecycle moves rows to it"),
        (
            [
                {
                    "name": "bq",
                    "kind": "bigquery",
                    "project": "p",
                    "dataset": "d",
                    "lifecycle": {"to": "cold", "after": "P1D"},
                },
                COLD,
            ],
            "('postgres', 'mysql', 'sqlite') destinations, not bigquery",
        ),
        (
            [
                {**HOT, "tables": ["t"], "lifecycle": {"to": "cold", "after": "P1D"}},
                {**COLD, "tables": ["u"]},
            ],
            "must cover every table",
        ),
        (
            [{**HOT, "lifecycle": {"to": "cold", "after": "P1D", "batch": 0}}, COLD],
            "Expected `int` >= 1 - at `$.destinations[0].lifecycle.batch`",
        ),
    ],
)
def test_bad_lifecycle_blocks_get_clear_errors(destinations: list[object], message: str) -> None:
    with pytest.raises(DeclarationError) as caught:
        parse_declarations([("x.yaml", {**TABLES, "destinations": destinations})])
    assert message in caught.value.message and caught.value.message.startswith("x.yaml")


def test_a_lifecycle_block_is_read() -> None:
    decls = parse_declarations(
        [
            (
                "x.yaml",
                {
                    **TABLES,
                    "destinations": [{**HOT, "lifecycle": {"to": "cold", "after": "PT12H"}}, COLD],
                },
            )
        ]
    )
    hot = decls.gateways["g"].destinations["hot"]
    assert hot.lifecycle is not None
    assert (hot.lifecycle.to, hot.lifecycle.after_s, hot.lifecycle.batch) == ("cold", 43_200, 5_000)
    assert decls.gateways["g"].destinations["cold"].role == "cold"
