"""Checkpoints on the real local Spark: what the job writes, what each client is served, and
clients bootstrapped from one converging with clients that paged from zero.

One module-scoped lake (a gateway with three tables and team-based sync rules, flushed, merged
and checkpointed once) serves the first three tests; they read the checkpoint at its tagged
snapshots, so the writes the convergence test makes afterwards change nothing they see.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from click.testing import CliRunner

from lakesync_platform.adapters.checkpoints import LocalCheckpointStore
from lakesync_platform.cli import main
from lakesync_platform.client import GatewayConfig, HttpTransport, LakeSyncClient, create_client
from lakesync_platform.core.checkpoint import CheckpointStore, Manifest
from lakesync_platform.core.proto import decode_sync_response
from lakesync_platform.core.schema import TableSchema, parse_table_schema
from lakesync_platform.core.sync_rules import ClientView, parse_sync_rules
from lakesync_platform.pipeline.checkpoint import (
    check_checkpoint,
    current_manifest,
    run_checkpoint,
)
from lakesync_platform.pipeline.context import PipelineContext
from lakesync_platform.pipeline.flush import run_flush
from lakesync_platform.pipeline.state import run_state
from lakesync_platform.settings import PipelineSettings
from lakesync_platform.spark.checkpoint import tagged_cursors
from lakesync_platform.spark.layout import (
    CURSOR_COL,
    DELETE_CLIENT_COL,
    DELETE_HLC_COL,
    LIVE_COL,
    client_col,
    hlc_col,
    q,
    state_table,
    state_value,
)
from lakesync_platform.sync.cursors import split_cursor
from lakesync_platform.sync.service import SyncService
from lakesync_platform.testing import GatewayProcess
from lakesync_platform.wal.store import WriteAheadLog
from tests.checkpoint_kit import stamped_rows
from tests.gateway.test_convergence import HttpGateway
from tests.helpers import SECRET, token
from tests.sim import TsLikeClient

from .conftest import NOW_MS, TODOS, Pusher

NOTES = parse_table_schema(
    {
        "table": "notes",
        "columns": [
            {"name": "body", "type": "string"},
            {"name": "team", "type": "string"},
            {"name": "meta", "type": "json"},
        ],
    }
)
SECRETS = parse_table_schema({"table": "secrets", "columns": [{"name": "code", "type": "string"}]})
RULES = {
    "version": 1,
    "buckets": [
        {"name": "shared", "tables": ["todos"], "filters": []},
        {
            "name": "team",
            "tables": ["notes"],
            "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}],
        },
    ],  # secrets: in no bucket, so in nobody's view
}
TEAMS = {"alice": ["red"], "bob": ["blue", "green"]}


@dataclass
class Lake:
    """The module's gateway after one flush, state and checkpoint."""

    gw: str
    wal: WriteAheadLog
    service: SyncService
    pusher: Pusher
    ctx: PipelineContext
    store: CheckpointStore
    root: Path
    manifest: Manifest


def _fill(pusher: Pusher) -> None:
    for i in range(12):
        meta = {"n": i, "tags": ["a", "b"][: i % 3]} if i % 2 else None
        pusher.write(
            "w1", f"todo{i:03d}x", title=f"todo {i}", done=i % 3 == 0, priority=i, meta=meta
        )
    pusher.write("w2", "todo001x", title="renamed", priority=None)
    pusher.delete("w1", "todo002x")
    pusher.write("w2", "todo003x", done=None)
    teams = ["red", "blue", "green", "red", "blue"]
    for i, team in enumerate(teams * 2):
        pusher.write("w1", f"note{i:03d}{team}", table="notes", body=f"note {i}", team=team)
    pusher.write("w2", "note000red", table="notes", meta={"moved": False})
    pusher.delete("w1", "note004blue", table="notes")
    for i in range(3):
        pusher.write("w1", f"secret{i:03d}x", table="secrets", code=f"s{i}")


@pytest.fixture(scope="module")
def lake(spark: Any, lake_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    tmp = tmp_path_factory.mktemp("checkpoint")
    gw = "ck_" + uuid.uuid4().hex[:10]
    wal = WriteAheadLog.open(f"sqlite:///{tmp / 'wal.db'}")
    service = SyncService(wal, clock=lambda: NOW_MS)
    for schema in (TODOS, NOTES, SECRETS):
        wal.save_schema(gw, schema)
    rules = parse_sync_rules(RULES)
    assert rules is not None
    service.save_sync_rules(gw, rules)
    pusher = Pusher(service, gw)
    _fill(pusher)
    root = tmp / "checkpoints"
    settings = PipelineSettings(
        data_dir=lake_dir,
        wal_url=wal.url,
        defs_dir=tmp / "no-defs",
        checkpoints=str(root),
        checkpoint_chunk_bytes=600,  # a few rows per chunk: several chunks per table
    )
    ctx = PipelineContext(settings, spark=spark, wal=wal)
    run_flush(ctx, gw)
    run_state(ctx, gw)
    result = run_checkpoint(ctx, gw)
    assert result.written
    store = LocalCheckpointStore(root)
    manifest = current_manifest(store, gw)
    assert manifest is not None
    yield Lake(gw, wal, service, pusher, ctx, store, root, manifest)
    wal.close()


def _chunk_rows(lake: Lake) -> dict[tuple[str, str], Any]:
    out = {}
    for name in lake.manifest.chunks:
        data = lake.store.read(lake.gw, name)
        assert data is not None
        rows = stamped_rows(data)
        assert [r.row_id for r in rows] == sorted(r.row_id for r in rows)  # in row id order
        for r in rows:
            out[(r.table, r.row_id)] = r
    return out


def _state_at_tag(spark: Any, lake: Lake, schema: TableSchema) -> dict[str, Any]:
    """Live rows of a state table at the checkpoint's tag, as (values, stamps, delete, cursor)."""
    tag = lake.manifest.tag
    rows = spark.sql(
        f"SELECT * FROM {state_table(lake.gw, schema.table)} VERSION AS OF '{tag}'"
        f" WHERE {q(LIVE_COL)}"
    ).collect()
    out = {}
    for r in rows:
        cols = {
            c.name: (state_value(r[c.name], c.type), r[hlc_col(c.name)], r[client_col(c.name)])
            for c in schema.columns
            if r[hlc_col(c.name)] is not None
        }
        delete = (r[DELETE_HLC_COL] or 0, r[DELETE_CLIENT_COL] or "")
        out[r["row_id"]] = (cols, delete, r[CURSOR_COL])
    return out


@pytest.mark.spark
def test_the_checkpoint_equals_the_state_tables_at_its_cursor(
    spark: Any, lake_catalog: Any, lake: Lake
) -> None:
    m = lake.manifest
    assert m.cursor == lake.wal.max_cursor(lake.gw)  # the state covers the whole log
    assert m.chunk_count == len(m.chunks) > 3 and m.tag == f"lakesync-checkpoint-{m.cursor}"
    assert {c.table for c in m.chunk_info} == {"todos", "notes", "secrets"}
    assert all(c.bytes <= 600 or c.rows == 1 for c in m.chunk_info)
    chunked = _chunk_rows(lake)
    assert len(chunked) == m.total_deltas == sum(c.rows for c in m.chunk_info)
    for schema in (TODOS, NOTES, SECRETS):
        expected = _state_at_tag(spark, lake, schema)
        got = {
            row_id: (
                {n: (c.value, c.hlc, c.client_id) for n, c in r.state.columns.items()},
                (r.state.delete_hlc, r.state.delete_client),
                r.position,
            )
            for (table, row_id), r in chunked.items()
            if table == schema.table
        }
        assert got == expected, schema.table
        assert lake.manifest.cursor in tagged_cursors(
            spark, lake_catalog, state_table(lake.gw, schema.table)
        )
    # rows as the gateway holds them (the WAL's row state), values equal as JSON
    for (table, row_id), r in chunked.items():
        state = dict(lake.wal.row_states(lake.gw, table))[row_id]
        assert r.state.values() == state.values()
    assert "todo002x" not in {rid for _, rid in chunked}  # deleted before the cut
    check = check_checkpoint(lake.ctx, lake.gw)
    assert check.passed, check.description
    again = run_checkpoint(lake.ctx, lake.gw)
    assert not again.written and again.cursor == m.cursor


@pytest.mark.spark
def test_filtered_checkpoints_for_two_users_leak_nothing(lake: Lake) -> None:
    chunked = _chunk_rows(lake)
    rules = parse_sync_rules(RULES)
    for sub, teams in TEAMS.items():
        client = f"{sub}-leak"
        claims = {"sub": client, "teams": tuple(teams)}
        view = ClientView(rules, claims)
        visible = {key for key, r in chunked.items() if view.row_visible(key[0], r.state.values())}
        assert {t for t, _ in visible} == {"todos", "notes"}
        for stamped in (True, False):
            served = lake.service.checkpoint(
                lake.gw, client, lake.store, claims=claims, stamped=stamped
            )
            assert served is not None
            body = b"".join(served.frames)
            frames = _frames(body)
            if stamped:
                rows = [r for f in frames for r in stamped_rows(f)]
                assert {(r.table, r.row_id) for r in rows} == visible
                assert all(r == chunked[(r.table, r.row_id)] for r in rows)
            else:
                deltas = [d for f in frames for d in decode_sync_response(f)[0]]
                assert {(d.table, d.row_id) for d in deltas} == visible
                assert [d.op for d in deltas] == ["DELETE", "INSERT"] * len(visible)
            for _table, row_id in set(chunked) - visible:
                assert row_id.encode() not in body, (sub, row_id)
        held = lake.wal.client_records(lake.gw, client, [f"notes:{r}" for t, r in visible])
        assert held and all(rec.held for rec in held.values())


def _frames(body: bytes) -> list[bytes]:
    from lakesync_platform.client._wire import read_frames

    return list(read_frames([body]))


class _Paging(HttpTransport):
    """The Python client's HTTP transport without checkpoints: it pages from zero."""

    def checkpoint(self, client_id: str | None = None) -> None:
        return None


class _ClaimsGateway(HttpGateway):
    """The TS simulator's HTTP gateway with each client's claims in its token."""

    def __init__(self, base_url: str, gw: str, teams: Mapping[str, list[str]]) -> None:
        import random

        super().__init__(base_url, gw, random.Random(3), 0.0)
        self.teams = teams

    def _auth(self, client_id: str) -> dict[str, str]:
        teams = self.teams[client_id.split("-")[0]]
        return {"Authorization": "Bearer " + token(client_id, self.gw, teams=teams)}


def _python_client(
    tmp: Path, server: GatewayProcess, gw: str, sub: str, *, paging: bool
) -> LakeSyncClient:
    jwt = token(sub, gw, teams=TEAMS[sub.split("-")[0]])
    transport = _Paging(server.url, gw, token=jwt) if paging else None
    return create_client(
        name=sub,
        schemas=[TODOS, NOTES, SECRETS],
        client_id=sub,
        gateway=None if paging else GatewayConfig(server.url, gw, token=jwt),
        transport=transport,
        path=tmp / f"{sub}.db",
        auto_sync_ms=0,
    )


def _expected(lake: Lake, sub: str) -> dict[tuple[str, str], dict[str, Any]]:
    view = ClientView(
        parse_sync_rules(RULES), {"sub": sub, "teams": tuple(TEAMS[sub.split("-")[0]])}
    )
    out = {}
    for schema in (TODOS, NOTES, SECRETS):
        for row_id, state in lake.wal.row_states(lake.gw, schema.table):
            values = state.values()
            if state.live and view.row_visible(schema.table, values):
                out[(schema.table, row_id)] = {k: v for k, v in values.items() if v is not None}
    return out


def _held(client: LakeSyncClient) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for table in ("todos", "notes", "secrets"):
        for row_id, values in client.tracker.all(table).items():
            out[(table, row_id)] = {k: v for k, v in values.items() if v is not None}
    return out


@pytest.mark.spark
def test_bootstrapped_clients_converge_with_clients_that_paged_from_zero(
    lake: Lake, tmp_path: Path
) -> None:
    p = lake.pusher
    # After the cut: updates, a delete, new rows, and notes moving between teams (so rows leave
    # and enter views the bootstrapped clients got from the checkpoint).
    p.write("w2", "todo004x", title="after the cut")
    p.delete("w2", "todo005x")
    p.write("w1", "todo100x", title="new", done=True)
    p.write("w2", "note000red", table="notes", team="blue")  # leaves alice's view
    p.write("w2", "note001blue", table="notes", team="red")  # enters it, leaves bob's
    p.write("w1", "note200green", table="notes", team="green", body="new")
    server = GatewayProcess(
        tmp_path / "gw", SECRET, wal_url=lake.wal.url, extra_args=["--checkpoints", str(lake.root)]
    ).start()
    try:
        boot = {sub: _python_client(tmp_path, server, lake.gw, sub, paging=False) for sub in TEAMS}
        paged = {
            sub: _python_client(tmp_path, server, lake.gw, f"{sub}-p", paging=True) for sub in TEAMS
        }
        http = _ClaimsGateway(server.url, lake.gw, TEAMS)
        ts_boot = {
            sub: TsLikeClient(f"{sub}-ts", http, lambda: NOW_MS, bootstrap=True) for sub in TEAMS
        }
        ts_paged = {sub: TsLikeClient(f"{sub}-tsp", http, lambda: NOW_MS) for sub in TEAMS}
        for sub in TEAMS:
            boot[sub].sync_once()
            assert boot[sub].coordinator.cursor > lake.manifest.cursor
            ts_boot[sub].sync_once()
            (served,) = ts_boot[sub].checkpoint_cursors  # the caller's view tag, then C
            assert split_cursor(served)[1] == lake.manifest.cursor and served > lake.manifest.cursor
            paged[sub].sync_once()
            ts_paged[sub].sync_once()
        # everyone writes a little, then syncs until quiet; a bootstrapped TS client restarts
        boot["alice"].tracker.insert("todos", "todo300x", {"title": "from alice"})
        boot["bob"].tracker.update("notes", "note006blue", {"body": "bob was here"})
        paged["alice"].tracker.update("todos", "todo006x", {"done": True})
        ts_boot["bob"].insert("todos", "todo301x", {"title": "from the ts client"})
        ts_boot["alice"].update("notes", "note005red", {"body": "ts edit"})
        ts_boot["alice"].restart()
        for _ in range(3):
            for c in [*boot.values(), *paged.values()]:
                c.sync_once()
            for t in [*ts_boot.values(), *ts_paged.values()]:
                t.sync_once()
        # after its restart, and while a push answers with the cursor it pulled from (0), the
        # TS client asks again: it has pulled before, so it is told to page from the start
        after_restart = ts_boot["alice"].checkpoint_cursors[1:]
        assert after_restart and set(after_restart) == {0}
        for sub in TEAMS:
            want = _expected(lake, sub)
            assert _held(boot[sub]) == want, sub
            assert _held(paged[sub]) == want, sub
            assert ts_boot[sub].visible_rows() == want, sub
            assert ts_paged[sub].visible_rows() == want, sub
            assert ts_boot[sub].failed_applies == 0
        for c in [*boot.values(), *paged.values()]:
            c.close()
        http.http.close()
    finally:
        server.stop()


@pytest.mark.spark
def test_a_new_checkpoint_supersedes_the_old_one_which_goes_after_the_grace_period(
    spark: Any,
    lake_catalog: Any,
    lake_dir: Path,
    wal: WriteAheadLog,
    gw: str,
    pusher: Pusher,
    todos: TableSchema,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from assets.definitions import build_definitions
    from resources.sync_runs import checkpoint_job_name

    root = tmp_path / "checkpoints"
    env = {
        "LAKESYNC_DATA_DIR": str(lake_dir),
        "LAKESYNC_WAL_URL": wal.url,
        "LAKESYNC_DEFS_DIR": str(tmp_path / "no-defs"),
        "LAKESYNC_CHECKPOINTS": str(root),
        "LAKESYNC_CHECKPOINT_EVERY_ENTRIES": "2",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(env)
    job = checkpoint_job_name(gw)
    sensor = defs.resolve_sensor_def(f"{job}_growth")
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))

    def tick() -> Any:
        with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
            return sensor(context)

    assert isinstance(tick(), dg.SkipReason)  # nothing in the lake yet
    settings = PipelineSettings.from_env(env)
    ctx = PipelineContext(settings, spark=spark, wal=wal)
    for i in range(3):
        pusher.write("a", f"r{i}", title=f"t{i}")
    run_flush(ctx, gw)
    run_state(ctx, gw)
    assert isinstance(tick(), dg.RunRequest)  # no checkpoint yet
    result = defs.resolve_job_def(job).execute_in_process(instance=instance)
    assert result.success
    (event,) = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert (meta["cursor"], meta["rows"], meta["written"]) == (3, 3, True)
    assert meta["location"] == str(root) and meta["chunks"] == 1 and meta["bytes"] > 0
    (check,) = result.get_asset_check_evaluations()
    assert check.passed and check.check_name == "whole"
    assert isinstance(tick(), dg.SkipReason)  # the lake has not moved on

    store = LocalCheckpointStore(root)
    first = current_manifest(store, gw)
    assert first is not None
    pusher.write("b", "r1", title="changed")
    pusher.delete("b", "r2")
    pusher.write("b", "r3", title="new")
    run_flush(ctx, gw)
    run_state(ctx, gw)
    assert isinstance(tick(), dg.RunRequest)  # 3 more entries ≥ 2
    second = run_checkpoint(ctx, gw)
    assert (second.written, second.cursor, second.rows, second.removed) == (True, 6, 3, 0)
    names = {p.name for p in (root / gw).iterdir()}
    assert {"manifest.json", "manifest-3.json", "manifest-6.json", *first.chunks} <= names
    qualified = state_table(gw, "todos")
    assert tagged_cursors(spark, lake_catalog, qualified) == {3, 6}
    # a client that read the first manifest just before the swap still streams it whole
    old_reader = lake_frames(store, gw, first, ctx)
    assert sorted(r.row_id for r in old_reader) == ["r0", "r1", "r2"]

    # a generation that never published left a chunk and a half-written file behind
    (root / gw / "chunk-5-000.bin").write_bytes(b"orphan")
    (root / gw / "manifest.json.tmp-0123").write_bytes(b"{")
    later = PipelineContext(
        dataclasses.replace(settings, checkpoint_grace_s=0), spark=spark, wal=wal
    )
    done = run_checkpoint(later, gw)
    assert (done.written, done.cursor, done.removed) == (False, 6, 1)
    second_manifest = current_manifest(store, gw)
    assert second_manifest is not None
    left = {p.name for p in (root / gw).iterdir()}
    assert left == {"manifest.json", "manifest-6.json", *second_manifest.chunks}
    assert tagged_cursors(spark, lake_catalog, qualified) == {6}

    runner = CliRunner(env=env)
    common = ["--data-dir", str(lake_dir), "--wal-url", wal.url]
    shown = runner.invoke(main, ["status", *common, "--gw", gw])
    assert shown.exit_code == 0, shown.output
    assert f"  {gw}: cursor=6 age=" in shown.output and "rows=3 chunks=1" in shown.output
    ran = runner.invoke(main, ["run", "checkpoint", "--gw", gw, *common])
    assert ran.exit_code == 0, ran.output
    assert ran.stdout.startswith(f"checkpoint {gw}: up to date (cursor 6, 3 rows) in ")


def lake_frames(store: CheckpointStore, gw: str, manifest: Manifest, ctx: PipelineContext) -> Any:
    """Every row a stamped client gets from ``manifest`` (no filtering rules)."""
    from lakesync_platform.core.sync_rules import ClientView as View
    from lakesync_platform.sync.checkpoint import checkpoint_frames

    cfg = SyncService(ctx.wal, clock=lambda: NOW_MS).config(gw)
    frames = checkpoint_frames(
        store, gw, manifest, cfg, View(None, {}), cursor=manifest.cursor, stamped=True, record=None
    )
    return [r for f in _frames(b"".join(frames)) for r in stamped_rows(f)]
