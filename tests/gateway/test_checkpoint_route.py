"""``GET /v1/sync/{gw}/checkpoint``: the stream each client is served, filtered at serve time.

The checkpoints here are written from the WAL's row state with the pipeline's chunk codec
(:mod:`tests.checkpoint_kit`); tests/pipeline/test_checkpoint.py serves ones the Spark job wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync_platform.adapters.checkpoints import LocalCheckpointStore
from lakesync_platform.client._wire import read_frames
from lakesync_platform.core.checkpoint import CHECKPOINT_MEDIA_TYPE, Manifest
from lakesync_platform.core.errors import AdapterError
from lakesync_platform.core.proto import decode_sync_response
from lakesync_platform.sync.cursors import split_cursor
from tests.checkpoint_kit import stamped_rows, write_checkpoint

from .conftest import Gateway, GatewayFactory, assert_error

RULES = {
    "version": 1,
    "buckets": [
        {"name": "shared", "tables": ["todos"], "filters": []},
        {
            "name": "team",
            "tables": ["notes"],
            "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}],
        },
    ],
}


@pytest.fixture
def ckpt_root(tmp_path: Path) -> Path:
    """The gateway's checkpoint folder."""
    return tmp_path / "checkpoints"


@pytest.fixture
def gateway(make_gateway: GatewayFactory, ckpt_root: Path) -> Gateway:
    """An app that serves checkpoints from ``ckpt_root``."""
    return make_gateway(checkpoints=str(ckpt_root))


def _get(
    g: Gateway, gw: str, sub: str, *, stamped: bool, **claims: Any
) -> tuple[httpx.Response, list[bytes]]:
    params = {"format": "stamped"} if stamped else {}
    resp = g.client.get(
        f"/v1/sync/{gw}/checkpoint",
        params=params,
        headers={**g.auth(sub, gw, **claims), "Accept": CHECKPOINT_MEDIA_TYPE},
    )
    frames = list(read_frames([resp.content])) if resp.status_code == 200 else []
    return resp, frames


def _write(g: Gateway, gw: str, root: Path, **kw: Any) -> Manifest:
    return write_checkpoint(g.state.wal, gw, LocalCheckpointStore(root), **kw)


def test_no_checkpoint_is_a_404_and_a_bad_format_a_400(
    gateway: Gateway, gw: str, ckpt_root: Path
) -> None:
    resp, _ = _get(gateway, gw, "c1", stamped=True)
    assert_error(resp, 404, "NOT_FOUND", "No checkpoint available")
    bad = gateway.client.get(
        f"/v1/sync/{gw}/checkpoint", params={"format": "json"}, headers=gateway.auth("c1", gw)
    )
    assert_error(bad, 400, "VALIDATION_ERROR")
    other = gateway.client.get(
        f"/v1/sync/{gw}/checkpoint", params={"clientId": "c2"}, headers=gateway.auth("c1", gw)
    )
    assert_error(other, 403, "FORBIDDEN")
    # a manifest the gateway cannot serve is refused before the stream starts
    (ckpt_root / gw).mkdir(parents=True)
    (ckpt_root / gw / "manifest.json").write_text(
        '{"snapshotHlc":"7","generatedAt":"x","chunkCount":0,"totalDeltas":0,"chunks":[]}'
    )
    resp, _ = _get(gateway, gw, "c1", stamped=True)
    assert_error(resp, 503, "ADAPTER_ERROR")
    # the unversioned path (the TS client's apiVersion "") redirects like every other
    moved = gateway.client.get(f"/sync/{gw}/checkpoint", follow_redirects=False)
    assert moved.status_code == 301 and moved.headers["location"] == f"/v1/sync/{gw}/checkpoint"


def test_both_encodings_carry_what_a_pull_from_zero_does(
    gateway: Gateway, gw: str, ckpt_root: Path
) -> None:
    g = gateway
    for i in range(5):
        g.push(gw, [g.delta(f"r{i}", {"title": f"t{i}", "n": i, "tags": ["x", i]})])
    g.push(gw, [g.delta("r1", None, ahead_ms=1)])  # deleted: not in the checkpoint
    g.push(gw, [g.delta("r2", {"n": None}, ahead_ms=2, client_id="c2")], client_id="c2")
    manifest = _write(g, gw, ckpt_root, chunk_bytes=120)  # a chunk or two per row
    assert manifest.chunk_count >= 4 and manifest.total_deltas == 4

    resp, frames = _get(g, gw, "c9", stamped=True)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith(CHECKPOINT_MEDIA_TYPE)
    assert int(resp.headers["x-checkpoint-hlc"]) == manifest.cursor == g.state.wal.max_cursor(gw)
    rows = [r for f in frames for r in stamped_rows(f)]
    got = sorted(
        (
            r.row_id,
            r.state.newest_stamp(),
            r.state.delete_hlc,
            r.state.delete_client,
            sorted((n, c.value, c.hlc, c.client_id) for n, c in r.state.columns.items()),
        )
        for r in rows
    )
    stamped = g.pull(gw, "0", client_id="c8", format="stamped", limit="100").json()["deltas"]
    want = sorted(
        (
            d["rowId"],
            (int(d["hlc"]), d["clientId"]),
            int(d["deleteHlc"]),
            d["deleteClientId"],
            sorted((c["column"], c["value"], int(c["hlc"]), c["clientId"]) for c in d["columns"]),
        )
        for d in stamped
        if d["op"] == "INSERT"
    )
    assert got == want and len(got) == 4

    resp, frames = _get(g, gw, "c9", stamped=False)
    plain = [d for f in frames for d in decode_sync_response(f)[0]]
    pulled = g.pull_all(gw, "c7")
    live_pairs = [d for d in pulled if not (d["op"] == "DELETE" and d["hlc"] != "0")]
    assert [(d.op, d.row_id, str(d.hlc), d.delta_id) for d in plain] == [
        (d["op"], d["rowId"], d["hlc"], d["deltaId"]) for d in live_pairs
    ]
    r2 = next(d for d in plain if d.row_id == "r2" and d.op == "INSERT")
    assert {c.column: c.value for c in r2.columns} == {"title": "t2", "n": None, "tags": ["x", 2]}


def test_two_users_views_leak_nothing_and_rows_leaving_later_are_retracted(
    gateway: Gateway, gw: str, ckpt_root: Path
) -> None:
    g = gateway
    g.client.post(f"/v1/admin/sync-rules/{gw}", json=RULES, headers=g.admin(gw))
    notes = {f"note{i:02d}red": "red" for i in range(4)}
    notes |= {f"note{i:02d}blue": "blue" for i in range(3)}
    notes |= {"note00green": "green"}
    for row_id, team in notes.items():  # written by the service (an admin token)
        g.push(
            gw,
            [g.delta(row_id, {"team": team, "body": row_id}, table="notes")],
            headers=g.admin(gw),
        )
    g.push(gw, [g.delta("todo1", {"title": "shared"})])
    manifest = _write(g, gw, ckpt_root, chunk_bytes=200)
    views = {"alice": ["red"], "bob": ["blue"]}
    for sub, teams in views.items():
        for stamped in (True, False):
            resp, frames = _get(g, gw, sub, stamped=stamped, teams=teams)
            assert resp.status_code == 200
            tag, position = split_cursor(int(resp.headers["x-checkpoint-hlc"]))
            assert position == manifest.cursor and tag != 0  # the caller's view tag
            if stamped:
                got = {r.row_id for f in frames for r in stamped_rows(f)}
            else:
                got = {d.row_id for f in frames for d in decode_sync_response(f)[0]}
            visible = {r for r, t in notes.items() if t in teams}
            assert got == visible | {"todo1"}
            body = resp.content
            for row_id in set(notes) - visible:  # not even a row id leaves the server
                assert row_id.encode() not in body, (sub, row_id)

    # alice's red note moves to blue after the checkpoint: her pull from its cursor retracts it
    g.push(
        gw,
        [g.delta("note00red", {"team": "blue"}, table="notes", ahead_ms=5)],
        headers=g.admin(gw),
    )
    resp, _ = _get(g, gw, "alice", stamped=True, teams=["red"])
    since = resp.headers["x-checkpoint-hlc"]
    page = g.client.get(
        f"/v1/sync/{gw}/pull",
        params={"since": since, "clientId": "alice", "format": "stamped"},
        headers=g.auth("alice", gw, teams=["red"]),
    ).json()
    assert [(d["op"], d["rowId"]) for d in page["deltas"]] == [("DELETE", "note00red")]


def test_an_empty_view_is_one_frameless_200(gateway: Gateway, gw: str, ckpt_root: Path) -> None:
    g = gateway
    only_teams = {"version": 1, "buckets": [RULES["buckets"][1]]}  # type: ignore[index]
    g.client.post(f"/v1/admin/sync-rules/{gw}", json=only_teams, headers=g.admin(gw))
    g.push(gw, [g.delta("n1", {"team": "red"}, table="notes")])
    manifest = _write(g, gw, ckpt_root)
    resp, frames = _get(g, gw, "mallory", stamped=True, teams=["none"])
    assert resp.status_code == 200 and resp.content == b"" and frames == []
    assert split_cursor(int(resp.headers["x-checkpoint-hlc"]))[1] == manifest.cursor


def test_a_ts_client_that_pulled_before_is_sent_to_the_start(
    gateway: Gateway, gw: str, ckpt_root: Path
) -> None:
    """After a restart the TS client asks again while holding rows and queued writes; its
    applier would fail the whole checkpoint on a queued INSERT of a row it contains, yet move
    its cursor past it. So it is answered "nothing, from 0" — pulls page from the start."""
    g = gateway
    g.push(gw, [g.delta("r1", {"title": "x"})])
    _write(g, gw, ckpt_root)
    assert g.pull(gw, "0", client_id="c1").status_code == 200
    resp, frames = _get(g, gw, "c1", stamped=False)
    assert resp.status_code == 200 and frames == [] and resp.headers["x-checkpoint-hlc"] == "0"
    resp, frames = _get(g, gw, "c1", stamped=True)  # a stamped applier never fails: served
    assert len(frames) == 1 and resp.headers["x-checkpoint-hlc"] != "0"


def test_a_missing_chunk_ends_the_stream_with_an_error(
    gateway: Gateway, gw: str, ckpt_root: Path
) -> None:
    """Never a silent gap: the client would take a short stream for the whole checkpoint."""
    g = gateway
    for i in range(3):
        g.push(gw, [g.delta(f"r{i}", {"title": "x" * 50})])
    manifest = _write(g, gw, ckpt_root, chunk_bytes=80)
    (ckpt_root / gw / manifest.chunks[1]).unlink()
    store = LocalCheckpointStore(ckpt_root)
    for stamped in (True, False):
        served = g.state.services.sync.checkpoint(gw, "c5", store, stamped=stamped)
        assert served is not None
        with pytest.raises(AdapterError, match=r"missing|cannot open"):
            list(served.frames)
